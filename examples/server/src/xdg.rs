//! The per-user directories by the XDG base directory convention, shared by the server and `swh-admin`.

use std::path::PathBuf;

/// A per-user base directory by the XDG convention: `$VAR` when it is an absolute path, else `$HOME/fallback`.
/// `None` when neither is set (a service account without a home): the caller picks a relative directory.
pub fn xdg_dir(var: &str, fallback: &str) -> Option<PathBuf> {
    let from_var = std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute());
    from_var.or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(fallback)))
}

/// The data directory when none is given: `$XDG_DATA_HOME/strategy-webhook`, or
/// `~/.local/share/strategy-webhook`, whatever directory the server is started in.
pub fn default_data_dir() -> PathBuf {
    xdg_dir("XDG_DATA_HOME", ".local/share")
        .map_or_else(|| PathBuf::from("strategy-webhook-data"), |d| d.join("strategy-webhook"))
}
