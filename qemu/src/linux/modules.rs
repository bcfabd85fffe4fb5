//! Kernel modules: their dependencies from each module's own `.modinfo` section (Debian's
//! package ships no modules.dep; depmod normally writes it at install time), the closure of
//! what a set of modules needs, in load order, and the `modules.dep` busybox's modprobe reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The `depends=` list of a module's `.modinfo` section (names as modprobe knows them).
pub fn module_depends(elf: &[u8]) -> Result<Vec<String>> {
    let info = modinfo_section(elf)?;
    let mut deps = Vec::new();
    for field in info.split(|&b| b == 0) {
        if let Some(list) = field.strip_prefix(b"depends=") {
            let list = std::str::from_utf8(list).context("depends= is not UTF-8")?;
            deps.extend(
                list.split(',')
                    .filter(|d| !d.is_empty())
                    .map(str::to_string),
            );
        }
    }
    Ok(deps)
}

fn le16(b: &[u8], at: usize) -> Result<u16> {
    let s = b.get(at..at + 2).context("ELF truncated")?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}
fn le32(b: &[u8], at: usize) -> Result<u32> {
    let s = b.get(at..at + 4).context("ELF truncated")?;
    Ok(u32::from_le_bytes(s.try_into().expect("4 bytes")))
}
fn le64(b: &[u8], at: usize) -> Result<u64> {
    let s = b.get(at..at + 8).context("ELF truncated")?;
    Ok(u64::from_le_bytes(s.try_into().expect("8 bytes")))
}

/// The bytes of the `.modinfo` section of a little-endian ELF64 relocatable object.
fn modinfo_section(b: &[u8]) -> Result<&[u8]> {
    if b.get(..4) != Some(b"\x7fELF".as_slice()) || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        bail!("not a little-endian ELF64 file");
    }
    let shoff = usize::try_from(le64(b, 0x28)?)?;
    let shentsize = usize::from(le16(b, 0x3a)?);
    let shnum = usize::from(le16(b, 0x3c)?);
    let shstrndx = usize::from(le16(b, 0x3e)?);
    if shentsize < 0x40 || shstrndx >= shnum {
        bail!("bad ELF section header table");
    }
    let section = |i: usize| -> Result<(u32, usize, usize)> {
        let at = shoff
            .checked_add(i.checked_mul(shentsize).context("overflow")?)
            .context("overflow")?;
        let name = le32(b, at)?;
        let offset = usize::try_from(le64(b, at + 0x18)?)?;
        let size = usize::try_from(le64(b, at + 0x20)?)?;
        Ok((name, offset, size))
    };
    let bytes = |offset: usize, size: usize| -> Result<&[u8]> {
        b.get(offset..offset.checked_add(size).context("overflow")?)
            .context("ELF section outside the file")
    };
    let (_, str_off, str_size) = section(shstrndx)?;
    let names = bytes(str_off, str_size)?;
    for i in 0..shnum {
        let (name, offset, size) = section(i)?;
        let name = names.get(name as usize..).context("bad section name")?;
        let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        if &name[..end] == b".modinfo" {
            return bytes(offset, size);
        }
    }
    bail!("no .modinfo section")
}

/// The modules of one kernel tree (`lib/modules/<version>`), by name (`-` and `_` are the
/// same to modprobe; names are kept with `_`).
pub struct ModuleTree {
    pub dir: PathBuf,
    /// name -> path relative to `dir`.
    pub paths: BTreeMap<String, PathBuf>,
}

pub fn canonical(name: &str) -> String {
    name.replace('-', "_")
}

impl ModuleTree {
    pub fn scan(dir: &Path) -> Result<Self> {
        let mut paths = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in
                std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?
            {
                let entry = entry?;
                let path = entry.path();
                if entry.file_type()?.is_dir() {
                    stack.push(path);
                } else if let Some(stem) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".ko"))
                {
                    let rel = path.strip_prefix(dir).expect("under dir").to_path_buf();
                    paths.insert(canonical(stem), rel);
                }
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            paths,
        })
    }

    /// Every module `wanted` needs, dependencies before their users, with each one's
    /// direct dependencies.
    pub fn closure(&self, wanted: &[&str]) -> Result<Resolved> {
        resolve(wanted, |name| {
            let rel = self
                .paths
                .get(name)
                .with_context(|| format!("module {name} is not in {}", self.dir.display()))?;
            let path = self.dir.join(rel);
            let elf =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            Ok(module_depends(&elf)
                .with_context(|| format!("{}", path.display()))?
                .iter()
                .map(|d| canonical(d))
                .collect())
        })
    }

    /// `modules.dep` for the given modules (each line `path: dependency paths`, dependencies
    /// in the order modprobe loads them, last first, as depmod writes them).
    pub fn modules_dep(&self, modules: &[String], deps: &BTreeMap<String, Vec<String>>) -> String {
        let mut out = String::new();
        for m in modules {
            let mut line = format!("{}:", self.paths[m].display());
            let mut all = Vec::new();
            collect_deps(m, deps, &mut all, &mut BTreeSet::new());
            for d in all.iter().rev() {
                line.push(' ');
                line.push_str(&self.paths[d].display().to_string());
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

fn collect_deps(
    m: &str,
    deps: &BTreeMap<String, Vec<String>>,
    out: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) {
    for d in deps.get(m).into_iter().flatten() {
        if seen.insert(d.clone()) {
            collect_deps(d, deps, out, seen);
            out.push(d.clone());
        }
    }
}

/// Modules in load order and their direct dependencies.
#[derive(Debug)]
pub struct Resolved {
    pub order: Vec<String>,
    pub deps: BTreeMap<String, Vec<String>>,
}

/// Depth-first closure: every module reachable from `wanted`, each after its dependencies.
/// A dependency cycle is an error (modprobe could not load it either).
pub fn resolve(
    wanted: &[&str],
    mut depends: impl FnMut(&str) -> Result<Vec<String>>,
) -> Result<Resolved> {
    let mut order = Vec::new();
    let mut done = BTreeSet::new();
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    fn visit(
        name: &str,
        depends: &mut dyn FnMut(&str) -> Result<Vec<String>>,
        graph: &mut BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) -> Result<()> {
        if done.contains(name) {
            return Ok(());
        }
        if path.iter().any(|p| p == name) {
            bail!("module dependency cycle: {} -> {name}", path.join(" -> "));
        }
        if !graph.contains_key(name) {
            let d = depends(name)?;
            graph.insert(name.to_string(), d);
        }
        path.push(name.to_string());
        for d in graph[name].clone() {
            visit(&d, depends, graph, path, done, order)?;
        }
        path.pop();
        done.insert(name.to_string());
        order.push(name.to_string());
        Ok(())
    }
    for w in wanted {
        visit(
            &canonical(w),
            &mut depends,
            &mut graph,
            &mut Vec::new(),
            &mut done,
            &mut order,
        )?;
    }
    Ok(Resolved { order, deps: graph })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 object: null section, .modinfo, .shstrtab.
    fn elf_with_modinfo(info: &[u8]) -> Vec<u8> {
        let shstr = b"\0.modinfo\0.shstrtab\0";
        let mut b = vec![0u8; 0x40];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        let info_off = b.len();
        b.extend_from_slice(info);
        let str_off = b.len();
        b.extend_from_slice(shstr);
        while !b.len().is_multiple_of(8) {
            b.push(0);
        }
        let shoff = b.len();
        let mut sh = |name: u32, off: usize, size: usize| {
            let mut s = vec![0u8; 0x40];
            s[..4].copy_from_slice(&name.to_le_bytes());
            s[0x18..0x20].copy_from_slice(&(off as u64).to_le_bytes());
            s[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            b.extend_from_slice(&s);
        };
        sh(0, 0, 0);
        sh(1, info_off, info.len());
        sh(10, str_off, shstr.len());
        b[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        b[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes());
        b[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        b[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes());
        b
    }

    #[test]
    fn depends_come_from_modinfo() {
        let elf = elf_with_modinfo(b"license=GPL\0depends=ib_core,mlx4_core\0vermagic=6.1\0");
        assert_eq!(module_depends(&elf).unwrap(), ["ib_core", "mlx4_core"]);
        let none = elf_with_modinfo(b"license=GPL\0depends=\0");
        assert!(module_depends(&none).unwrap().is_empty());
    }

    #[test]
    fn malformed_objects_are_errors_not_panics() {
        assert!(module_depends(b"").is_err());
        assert!(module_depends(b"\x7fELF\x02\x01").is_err());
        let mut elf = elf_with_modinfo(b"depends=x\0");
        let n = elf.len();
        elf.truncate(n - 0x30);
        assert!(module_depends(&elf).is_err());
        let mut bad_off = elf_with_modinfo(b"depends=x\0");
        bad_off[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(module_depends(&bad_off).is_err());
    }

    #[test]
    fn closure_orders_dependencies_first_and_refuses_cycles() {
        let graph: BTreeMap<&str, Vec<&str>> = [
            ("mlx4_ib", vec!["ib_core", "mlx4_core"]),
            ("ib_uverbs", vec!["ib_core"]),
            ("ib_core", vec![]),
            ("mlx4_core", vec![]),
        ]
        .into();
        let deps = |n: &str| -> Result<Vec<String>> {
            Ok(graph
                .get(n)
                .with_context(|| format!("unknown {n}"))?
                .iter()
                .map(|s| s.to_string())
                .collect())
        };
        let r = resolve(&["mlx4-ib", "ib_uverbs"], deps).unwrap();
        assert_eq!(r.order, ["ib_core", "mlx4_core", "mlx4_ib", "ib_uverbs"]);
        assert_eq!(r.deps["mlx4_ib"], ["ib_core", "mlx4_core"]);
        assert!(resolve(&["nope"], deps).is_err());
        let cyclic = |n: &str| -> Result<Vec<String>> {
            Ok(vec![if n == "a" { "b" } else { "a" }.to_string()])
        };
        let err = resolve(&["a"], cyclic).unwrap_err().to_string();
        assert!(err.contains("cycle"), "{err}");
    }
}
