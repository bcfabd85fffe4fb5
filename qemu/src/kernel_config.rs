//! The kernel configuration as the command line gives it: each subcommand builds an
//! `ibconfig::Config` from its flags (typed), then `--config FILE` and `--set KEY=VALUE`
//! add to it, every key, value and rule checked as the kernel checks them. A refusal is a
//! usage error (exit 2) with the kernel's message, before anything is built or booted; the
//! text the kernel gets is the configuration's own emitter's ([`check_config`]).

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use ibconfig::Config;

use crate::args::SetArgs;
use crate::Usage;

/// Who sets a key a subcommand does not let `--set` give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetBy {
    /// The subcommand itself, for the reason given (`pingpong` boots one server and one
    /// client).
    Runner(&'static str),
    /// The flag named.
    Flag(&'static str),
}

/// The keys a subcommand sets itself (or from its flags), which `--set` may not give: a
/// `--set` that would override them is refused, naming who sets them.
pub type Owned<'a> = &'a [(&'a str, SetBy)];

/// A configuration error as the runner reports it: a usage error (exit 2) whose message
/// is the kernel's, after `what` (where the setting came from).
fn refused(what: &str, error: impl std::fmt::Display) -> anyhow::Error {
    Usage(format!("{what}: {error}")).into()
}

/// Applies one `--set KEY=VALUE`, checked as the kernel would check the line (a known key,
/// a value it accepts), unless `owned` says the subcommand sets the key.
fn apply_one(config: &mut Config, assignment: &str, owned: Owned, command: &str) -> Result<()> {
    let what = format!("--set {assignment}");
    let Some((key, value)) = assignment.split_once('=') else {
        return Err(refused(
            &what,
            format_args!("expected key=value, found {assignment:?}"),
        ));
    };
    let (key, value) = (key.trim(), value.trim());
    if let Some((_, by)) = owned.iter().find(|(k, _)| *k == key) {
        return Err(refused(
            &what,
            match by {
                SetBy::Runner(why) => format!("{command} sets {key} itself ({why})"),
                SetBy::Flag(flag) => format!("{command} sets {key} from {flag}: use that flag"),
            },
        ));
    }
    config.apply(key, value).map_err(|e| match e {
        ibconfig::KeyError::Unknown => refused(&what, format_args!("unknown key {key:?}")),
        ibconfig::KeyError::BadValue(why) => refused(
            &what,
            format_args!("key {key:?}: bad value {value:?}: {why}"),
        ),
    })
}

/// Applies the `--set` assignments in order, each checked as the kernel would check it; a
/// key in `owned` is refused (the subcommand `command` sets it).
pub(crate) fn apply_set(
    config: &mut Config,
    set: &SetArgs,
    owned: Owned,
    command: &str,
) -> Result<()> {
    for assignment in &set.set {
        apply_one(config, assignment, owned, command)?;
    }
    Ok(())
}

/// Checks a whole configuration as the kernel will (rules between keys included) and
/// returns the text the kernel gets; a refusal is a usage error with the kernel's message.
pub fn check_config(config: &Config) -> Result<String> {
    boot::ramdisk(config).map_err(|e| refused("configuration refused", e))
}

/// The configuration of `--config FILE` (if any, else the kernel's defaults) and `--set`,
/// every key and value checked; the rules between keys are [`check_config`]'s.
pub(crate) fn read_config(file: Option<&Path>, set: &SetArgs) -> Result<Config> {
    let mut config = match file {
        Some(path) => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read configuration {}", path.display()))?;
            boot::config_text(&text)
                .map_err(|e| refused(&format!("configuration {}", path.display()), e))?
        }
        None => Config::default(),
    };
    apply_set(&mut config, set, &[], "")?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> SetArgs {
        SetArgs {
            set: items.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn config_file_and_set_options_combine() {
        let dir = std::env::temp_dir().join(format!("ibkern-cli-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("node.cfg");
        fs::write(&file, "mode=idle # interactive\nlog=info\n").unwrap();
        let config = read_config(Some(&file), &set(&["log=debug", "role=server"])).unwrap();
        assert_eq!(config.to_string(), "mode=idle\nlog=debug\nrole=server\n");
        fs::write(&file, "mode idle\n").unwrap();
        let err = format!("{:#}", read_config(Some(&file), &set(&[])).unwrap_err());
        assert!(
            err.contains("config line 1: expected key=value, found \"mode idle\""),
            "{err}"
        );
        // Keys and values are the kernel's to define, and checked here the same way.
        fs::write(&file, "mode=idle\nrole=clinet\n").unwrap();
        let e = read_config(Some(&file), &set(&[])).unwrap_err();
        assert!(e.is::<Usage>(), "a usage error (exit 2)");
        assert!(
            format!("{e:#}").ends_with(
                "config line 2: key \"role\": bad value \"clinet\": expected one of client|server"
            ),
            "{e:#}"
        );
        fs::write(&file, "mode=pingpong\n").unwrap();
        let config = read_config(Some(&file), &set(&[])).unwrap();
        let e = check_config(&config).unwrap_err();
        assert!(e.is::<Usage>());
        assert_eq!(
            e.to_string(),
            "configuration refused: config: mode=pingpong needs role=client|server"
        );
        for (bad, message) in [
            ("x", "--set x: expected key=value, found \"x\""),
            ("frobnicate=1", "--set frobnicate=1: unknown key \"frobnicate\""),
            (
                "iters=0",
                "--set iters=0: key \"iters\": bad value \"0\": expected an iteration count 5..=16777216",
            ),
        ] {
            let e = read_config(None, &set(&[bad])).unwrap_err();
            assert!(e.is::<Usage>());
            assert_eq!(e.to_string(), message);
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_key_the_subcommand_sets_is_not_overridden_by_set() {
        const OWNED: Owned<'static> = &[
            ("role", SetBy::Runner("one server and one client")),
            ("iters", SetBy::Flag("-n")),
        ];
        let mut config = Config::default();
        config.set_role(ibconfig::Role::Client);
        for (item, message) in [
            (
                "role=server",
                "--set role=server: pingpong sets role itself (one server and one client)",
            ),
            (
                "iters=20",
                "--set iters=20: pingpong sets iters from -n: use that flag",
            ),
        ] {
            let e = apply_set(&mut config, &set(&[item]), OWNED, "pingpong").unwrap_err();
            assert!(e.is::<Usage>(), "a usage error (exit 2)");
            assert_eq!(e.to_string(), message);
        }
        assert_eq!(config.role, Some(ibconfig::Role::Client), "unchanged");
        apply_set(&mut config, &set(&["log=debug"]), OWNED, "pingpong").unwrap();
        assert_eq!(config.log, ibconfig::LogLevel::Debug);
    }
}
