//! `--token`, `--token-file` and `PSI_TOKEN`: how a command gets bearer tokens from its
//! user (the client commands one, `psi serve --token-file` a list), never echoing them.

use std::path::{Path, PathBuf};

/// How a client command gets its bearer token. Prefer `--token-file` or `PSI_TOKEN`:
/// `--token` shows the secret in the process list.
#[derive(clap::Args, Clone, Debug)]
pub struct TokenArgs {
    /// Bearer token (visible in the process list: prefer --token-file or PSI_TOKEN).
    #[arg(long, conflicts_with = "token_file")]
    token: Option<String>,
    /// File holding the bearer token (its first line that is not empty or a # comment).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// `--token`, else the token in `--token-file`, else the `PSI_TOKEN` environment
    /// variable, else none.
    pub fn resolve(&self) -> Result<Option<String>, String> {
        if let Some(t) = &self.token {
            return Ok(Some(t.clone()));
        }
        if let Some(path) = &self.token_file {
            let first = read_token_file(path)?.into_iter().next();
            return Ok(first);
        }
        Ok(std::env::var("PSI_TOKEN").ok())
    }
}

/// The tokens in `path`, one per line; empty lines and lines starting with `#` are skipped.
/// A file with no token is an error. Messages never contain the file's content.
pub fn read_token_file(path: &Path) -> Result<Vec<String>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    if tokens.is_empty() {
        return Err(format!("token file {}: no token in it", path.display()));
    }
    Ok(tokens)
}
