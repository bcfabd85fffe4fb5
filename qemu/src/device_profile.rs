//! `--profile NAME[,NAME...]`: the device profile (`sim/profiles`, docs/model.md "Device
//! profiles") of the emulated HCAs a command starts, one per node in order.

use sim::DeviceProfile;

/// The flag every command that starts the model takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ProfileArgs {
    /// The emulated HCA's device profile: cx3-fdr (a single-port ConnectX-3 FDR with
    /// firmware 2.42.5000), cx3-fdr-2p (dual-port, as on Chameleon's InfiniBand nodes),
    /// cx3pro-fdr (a ConnectX-3 Pro) or reduced (the model's card without the capabilities
    /// that change a driver's paths); docs/model.md, "Device profiles". Comma-separated, one
    /// per node in order, the last one repeating.
    #[arg(
        long = "profile",
        value_name = "NAME[,NAME]",
        value_delimiter = ',',
        default_value = sim::profile::DEFAULT_PROFILE,
        value_parser = parse_profile
    )]
    pub profiles: Vec<DeviceProfile>,
}

impl Default for ProfileArgs {
    fn default() -> Self {
        ProfileArgs {
            profiles: vec![DeviceProfile::default()],
        }
    }
}

/// A built-in profile by name; an unknown one is refused with the list (a usage error: exit 2).
pub fn parse_profile(name: &str) -> Result<DeviceProfile, String> {
    DeviceProfile::named(name).map_err(|e| e.to_string())
}

/// A built-in profile's name, checked as [`parse_profile`] checks it.
pub fn parse_profile_name(name: &str) -> Result<String, String> {
    parse_profile(name).map(|p| p.name)
}

impl ProfileArgs {
    /// The profile of node `index` (the last one given repeats).
    pub fn for_node(&self, index: usize) -> DeviceProfile {
        self.profiles
            .get(index)
            .or(self.profiles.last())
            .cloned()
            .unwrap_or_default()
    }

    /// The profiles of `n` nodes.
    pub fn for_nodes(&self, n: usize) -> Vec<DeviceProfile> {
        (0..n).map(|i| self.for_node(i)).collect()
    }

    /// The names, as the flag takes them.
    pub fn names(&self) -> String {
        self.profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        p: ProfileArgs,
    }

    #[test]
    fn the_default_is_the_default_profile_and_a_list_gives_each_node_its_own() {
        let c = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(c.p.names(), sim::profile::DEFAULT_PROFILE);
        assert_eq!(c.p.for_node(3).name, sim::profile::DEFAULT_PROFILE);
        let c = Cli::try_parse_from(["x", "--profile", "cx3-fdr,cx3pro-fdr"]).unwrap();
        let names: Vec<String> = c.p.for_nodes(3).into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["cx3-fdr", "cx3pro-fdr", "cx3pro-fdr"]);
    }

    #[test]
    fn an_unknown_profile_is_a_usage_error_listing_the_profiles() {
        let e = Cli::try_parse_from(["x", "--profile", "cx3-fdr,cx7"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let msg = e.to_string();
        for name in DeviceProfile::names() {
            assert!(msg.contains(name), "{msg}");
        }
    }

    #[test]
    fn the_help_names_every_built_in_profile() {
        let help = Cli::command().render_long_help().to_string();
        for name in DeviceProfile::names() {
            assert!(help.contains(name), "--help lacks {name}:\n{help}");
        }
    }
}
