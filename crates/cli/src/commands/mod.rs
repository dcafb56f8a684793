//! One module per subcommand.

pub mod demo;
pub mod devices;
pub mod flim;
pub mod mc;
pub mod output;
pub mod perfusion;
pub mod speckle;

/// Arguments of a modality that has not landed yet: accept anything, say so.
#[derive(Debug, clap::Args)]
pub struct NotBuilt {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _rest: Vec<String>,
}

pub fn not_built(name: &str, issue: u32) -> anyhow::Result<()> {
    anyhow::bail!(
        "`biogpu {name}` is not built yet (tracked in issue {issue}); see README.md for the status of each modality"
    )
}
