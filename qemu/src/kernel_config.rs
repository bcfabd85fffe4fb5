//! The kernel configuration as the command line gives it (`--config FILE`, `--set`), every
//! key, value and rule checked as the kernel checks them: a refusal is a usage error (exit 2)
//! with the kernel's message, before anything is built or booted.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use boot::Config;

use crate::args::SetArgs;
use crate::Usage;

/// A configuration error as the runner reports it: a usage error (exit 2) whose message
/// is the kernel's, after `what` (where the setting came from).
fn refused(what: &str, error: boot::ConfigError) -> anyhow::Error {
    Usage(format!("{what}: {error}")).into()
}

/// Applies the `--set` assignments, each checked as the kernel would check it.
pub(crate) fn apply_set(config: &mut Config, set: &SetArgs) -> Result<()> {
    for assignment in &set.set {
        config
            .apply(assignment)
            .map_err(|e| refused(&format!("--set {assignment}"), e))?;
    }
    Ok(())
}

/// Checks a whole configuration as the kernel will (rules between keys included); a
/// refusal is a usage error with the kernel's message.
pub(crate) fn check_config(config: &Config) -> Result<ibconfig::Config> {
    config
        .check()
        .map_err(|e| refused("configuration refused", e))
}

/// The configuration of `--config FILE` (if any) and `--set`, every key and value checked;
/// the rules between keys are [`check_config`]'s.
pub(crate) fn read_config(file: Option<&Path>, set: &SetArgs) -> Result<Config> {
    let mut config = match file {
        Some(path) => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read configuration {}", path.display()))?;
            Config::parse(&text)
                .map_err(|e| refused(&format!("configuration {}", path.display()), e))?
        }
        None => Config::new(),
    };
    apply_set(&mut config, set)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_and_set_options_combine() {
        let dir = std::env::temp_dir().join(format!("ibkern-cli-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("node.cfg");
        fs::write(&file, "mode=idle # interactive\nlog=info\n").unwrap();
        let set = SetArgs {
            set: vec!["log=debug".into(), "role=server".into()],
        };
        let config = read_config(Some(&file), &set).unwrap();
        assert_eq!(config.to_ramdisk(), "mode=idle\nlog=debug\nrole=server\n");
        fs::write(&file, "mode idle\n").unwrap();
        let err = format!(
            "{:#}",
            read_config(Some(&file), &SetArgs { set: vec![] }).unwrap_err()
        );
        assert!(
            err.contains("config line 1: expected key=value, found \"mode idle\""),
            "{err}"
        );
        // Keys and values are the kernel's to define, and checked here the same way.
        fs::write(&file, "mode=idle\nrole=clinet\n").unwrap();
        let e = read_config(Some(&file), &SetArgs { set: vec![] }).unwrap_err();
        assert!(e.is::<Usage>(), "a usage error (exit 2)");
        assert!(
            format!("{e:#}").ends_with(
                "config line 2: key \"role\": bad value \"clinet\": expected one of client|server"
            ),
            "{e:#}"
        );
        fs::write(&file, "mode=pingpong\n").unwrap();
        let config = read_config(Some(&file), &SetArgs { set: vec![] }).unwrap();
        let e = check_config(&config).unwrap_err();
        assert!(e.is::<Usage>());
        assert_eq!(
            e.to_string(),
            "configuration refused: config: mode=pingpong needs role=client|server"
        );
        let e = read_config(
            None,
            &SetArgs {
                set: vec!["x".into()],
            },
        )
        .unwrap_err();
        assert!(e.is::<Usage>());
        assert_eq!(e.to_string(), "--set x: expected key=value, found \"x\"");
        let _ = fs::remove_dir_all(&dir);
    }
}
