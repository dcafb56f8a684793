//! `biogpu completions SHELL` and `biogpu man`: shell completions and man pages generated
//! from the command-line definition itself, so they never drift from it.

use anyhow::Context;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write `biogpu.1` and one page per command (`biogpu-flim-fit.1`, ...) into this
    /// folder instead of printing `biogpu.1` to stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Replace pages that exist in --out.
    #[arg(long)]
    force: bool,
}

/// Print the completion script for `args.shell`.
pub fn completions(args: &CompletionsArgs, mut command: clap::Command) -> anyhow::Result<()> {
    use std::io::Write;
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "biogpu", &mut script);
    std::io::stdout()
        .lock()
        .write_all(&script)
        .context("writing the completion script to stdout")
}

/// Print the top-level man page, or write every page into `--out`.
pub fn man(args: &ManArgs, command: clap::Command) -> anyhow::Result<()> {
    match &args.out {
        None => clap_mangen::Man::new(command)
            .render(&mut std::io::stdout().lock())
            .context("writing the man page to stdout"),
        Some(dir) => {
            let mut command = command.disable_help_subcommand(true);
            command.build();
            let pages = pages(&command);
            // Man pages are not results: no provenance file among them, but no page is
            // replaced without --force either.
            if !args.force {
                let exist: Vec<String> = pages
                    .iter()
                    .map(clap_mangen::Man::get_filename)
                    .filter(|name| dir.join(name).exists())
                    .collect();
                anyhow::ensure!(
                    exist.is_empty(),
                    "nothing was written: {} page(s) exist in {}: {}; pass --force to replace them",
                    exist.len(),
                    dir.display(),
                    exist.join(", ")
                );
            }
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for page in &pages {
                let path = dir.join(page.get_filename());
                page.generate_to(dir)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            crate::say!("{} man pages written to {}", pages.len(), dir.display());
            Ok(())
        }
    }
}

/// One page for the command and one for each of its subcommands, at every depth.
fn pages(command: &clap::Command) -> Vec<clap_mangen::Man> {
    let mut out = vec![clap_mangen::Man::new(command.clone())];
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        out.extend(pages(sub));
    }
    out
}
