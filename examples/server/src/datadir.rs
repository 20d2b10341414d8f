//! The data directory: created private, and the secrets kept in it (the admin token; the key is `tls.rs`'s).

use std::path::Path;
use strategy_webhook::TokenHash;

/// The admin API's bearer token: generated on first start, then read back from the data directory.
pub fn admin_token(data_dir: &Path) -> Result<String, String> {
    let path = data_dir.join("admin-token");
    match std::fs::read_to_string(&path) {
        Ok(s) if TokenHash::parse(s.trim().as_bytes()).is_some() => Ok(s.trim().to_owned()),
        Ok(_) => Err(format!("{} is not 64 lowercase hex characters; delete it to get a new token", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = crate::app::random_hex()?;
            write_private(&path, format!("{token}\n").as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(token)
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Creates the data directory, readable by the owner only: it holds the private key, the admin token and the
/// rotated webhook tokens.
pub fn create_private_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

/// Writes a secret file readable by the owner only.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes a file so that a reader never sees it half written.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(tmp, path)
}
