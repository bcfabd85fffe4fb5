//! `ibkern-diag-profile`: a device profile file from a `mode=diag` report, so the model can
//! be run as the card the report came from (`sim::diag_profile`).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Write the device profile file (sim/profiles/*.toml format) of the card a `mode=diag`
/// report describes. The report is the kernel's console output, pasted whole: only its
/// `diag: cap` lines are read.
#[derive(Debug, Parser)]
#[command(name = "ibkern-diag-profile", version, after_help = EXAMPLES)]
struct Cli {
    /// The report (a console log); `-` or nothing reads standard input.
    report: Option<PathBuf>,

    /// The profile's name (its file name without `.toml`).
    #[arg(long, default_value = "from-diag")]
    name: String,

    /// Write the file here instead of standard output.
    #[arg(long, short)]
    out: Option<PathBuf>,
}

const EXAMPLES: &str = "Example:\n  cargo run -p sim --bin ibkern-diag-profile -- --name my-card console.log > my-card.toml";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut text = String::new();
    let read = match cli.report.as_deref() {
        None => std::io::stdin().read_to_string(&mut text).map(|_| ()),
        Some(p) if p.as_os_str() == "-" => std::io::stdin().read_to_string(&mut text).map(|_| ()),
        Some(p) => std::fs::read_to_string(p).map(|t| text = t),
    };
    if let Err(e) = read {
        eprintln!("ibkern-diag-profile: cannot read the report: {e}");
        return ExitCode::from(2);
    }
    match sim::diag_profile::profile_from_diag(&text, &cli.name) {
        Ok((file, _)) => {
            let written = match &cli.out {
                Some(p) => std::fs::write(p, file),
                None => {
                    print!("{file}");
                    Ok(())
                }
            };
            if let Err(e) = written {
                eprintln!("ibkern-diag-profile: cannot write the profile: {e}");
                return ExitCode::from(2);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ibkern-diag-profile: {e}");
            ExitCode::FAILURE
        }
    }
}
