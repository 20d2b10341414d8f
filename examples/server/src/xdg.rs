//! The per-user directories by the XDG base directory convention, shared by the server and `swh-admin`.

use std::path::PathBuf;

/// A per-user base directory by the XDG convention: `$VAR` when it is an absolute path, else `$HOME/fallback`
/// when HOME is. `None` without either (a service account without a home): a relative one would move with the
/// working directory.
pub fn xdg_dir(var: &str, fallback: &str) -> Option<PathBuf> {
    let from_var = std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute());
    from_var
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()).map(|h| h.join(fallback)))
}

/// The data directory when none is given: `$XDG_DATA_HOME/strategy-webhook`, or
/// `~/.local/share/strategy-webhook`, whatever directory the server is started in. `None` without either: a
/// directory relative to the working directory was another one (an empty database) when the server was started
/// from elsewhere, so there is no default then.
pub fn default_data_dir() -> Option<PathBuf> {
    xdg_dir("XDG_DATA_HOME", ".local/share").map(|d| d.join("strategy-webhook"))
}
