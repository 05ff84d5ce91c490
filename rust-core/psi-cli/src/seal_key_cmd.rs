//! `psi seal-key new FILE`: a new at-rest key file, the key that seals the OPRF keys a
//! shared database stores (docs/deploy.md "At-rest key"). The key itself is written to
//! the file only (mode 0600), never to the terminal.

use psi_server::sealing::SealKeys;
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum SealKeyCommand {
    /// Write a new at-rest key file (one random key, mode 0600); refuses to overwrite.
    New {
        /// The key file to create.
        file: PathBuf,
    },
}

pub fn run(command: SealKeyCommand) -> Result<(), String> {
    match command {
        SealKeyCommand::New { file } => {
            SealKeys::generate_file(&file).map_err(|e| e.to_string())?;
            let keys = SealKeys::from_file(&file).map_err(|e| e.to_string())?;
            let shown = file.display();
            println!(
                "at-rest key {} written to {shown} (mode 0600)\n\
                 next steps:\n  \
                 1. copy {shown} to every instance host (the same file on all), mode 0600,\n     \
                    readable only by the user running psi serve; keep it out of the\n     \
                    database host and its backups, and back it up apart from them\n  \
                 2. start every instance with --seal-key-file {shown}\n\
                 to rotate it later: make a new key with `psi seal-key new NEW`, put its key line\n\
                 first in this file on every instance, run `psi reseal`, then delete the old line\n\
                 (docs/deploy.md \"At-rest key\")",
                keys.sealing_key_id()
            );
            Ok(())
        }
    }
}
