//! A small QMP client, used once at start-up to find where INTx must be injected: the IOAPIC and
//! the two 8259s, whose QOM paths depend on the machine type and on device creation order.

use std::io::{self, BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// QOM paths of the interrupt controllers INTx is driven into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntxRoute {
    /// The IOAPIC (`/machine/i440fx/ioapic` on pc, `/machine/q35/ioapic` on q35).
    pub ioapic: String,
    /// The 8259 at I/O base 0x20, if present.
    pub pic_master: Option<String>,
    /// The 8259 at I/O base 0xa0, if present.
    pub pic_slave: Option<String>,
}

pub(crate) struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

fn err(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

/// Connects to a listening unix socket, retrying until `deadline` (QEMU may not have created it yet).
pub(crate) fn connect_until(path: &Path, deadline: Instant) -> io::Result<UnixStream> {
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(err(format!("cannot connect to {}: {e}", path.display())))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

impl Qmp {
    /// Connects, reads the greeting and leaves capabilities negotiation mode. Every read is
    /// bounded by `timeout`.
    pub(crate) fn connect(path: &Path, deadline: Instant, timeout: Duration) -> io::Result<Qmp> {
        let stream = connect_until(path, deadline)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let writer = stream.try_clone()?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = qmp.read_value()?;
        if greeting.get("QMP").is_none() {
            return Err(err(format!("unexpected QMP greeting {greeting}")));
        }
        qmp.execute("qmp_capabilities", json!({}))?;
        Ok(qmp)
    }

    fn read_value(&mut self) -> io::Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(err("QMP connection closed"));
        }
        serde_json::from_str(&line).map_err(|e| err(format!("bad QMP line {line:?}: {e}")))
    }

    /// Runs one command and returns its `return` value (events in between are skipped).
    pub(crate) fn execute(&mut self, command: &str, arguments: Value) -> io::Result<Value> {
        let msg = json!({ "execute": command, "arguments": arguments });
        super::wire::send_all(&self.writer, format!("{msg}\n").as_bytes())?;
        loop {
            let v = self.read_value()?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                return Err(err(format!("QMP {command} failed: {e}")));
            }
        }
    }

    /// `qom-list`: (name, type) of every property of `path`.
    pub(crate) fn qom_list(&mut self, path: &str) -> io::Result<Vec<(String, String)>> {
        let r = self.execute("qom-list", json!({ "path": path }))?;
        let list = r
            .as_array()
            .ok_or_else(|| err(format!("qom-list {path}: not a list")))?;
        Ok(list
            .iter()
            .filter_map(|p| {
                Some((
                    p.get("name")?.as_str()?.to_string(),
                    p.get("type")?.as_str()?.to_string(),
                ))
            })
            .collect())
    }

    fn children(&mut self, path: &str) -> io::Result<Vec<(String, String)>> {
        Ok(self
            .qom_list(path)?
            .into_iter()
            .filter_map(|(name, ty)| {
                let inner = ty.strip_prefix("child<")?.strip_suffix('>')?.to_string();
                Some((format!("{}/{name}", path.trim_end_matches('/')), inner))
            })
            .collect())
    }

    /// Finds the IOAPIC (searching `/machine` and its direct children) and the 8259 pair (the
    /// `isa-i8259` objects under `/machine/unattached`, told apart by their `iobase`).
    pub(crate) fn lookup_intx_route(&mut self) -> io::Result<IntxRoute> {
        let is_ioapic = |ty: &str| ty == "ioapic" || ty == "kvm-ioapic";
        let is_pic = |ty: &str| ty == "isa-i8259" || ty == "kvm-i8259";
        let top = self.children("/machine")?;
        let mut ioapic = top
            .iter()
            .find(|(_, ty)| is_ioapic(ty))
            .map(|(p, _)| p.clone());
        if ioapic.is_none() {
            for (path, _) in top.iter().filter(|(p, _)| !p.ends_with("/unattached")) {
                if let Some((p, _)) = self
                    .children(path)?
                    .into_iter()
                    .find(|(_, ty)| is_ioapic(ty))
                {
                    ioapic = Some(p);
                    break;
                }
            }
        }
        let ioapic = ioapic.ok_or_else(|| err("no IOAPIC found under /machine"))?;
        let (mut pic_master, mut pic_slave) = (None, None);
        for (path, _) in self
            .children("/machine/unattached")?
            .into_iter()
            .filter(|(_, ty)| is_pic(ty))
        {
            let base = self.execute("qom-get", json!({ "path": path, "property": "iobase" }))?;
            match base.as_u64() {
                Some(0x20) => pic_master = Some(path),
                Some(0xa0) => pic_slave = Some(path),
                _ => {}
            }
        }
        Ok(IntxRoute {
            ioapic,
            pic_master,
            pic_slave,
        })
    }
}
