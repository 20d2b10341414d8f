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

/// Takes the data directory for this process alone, until it exits: two servers on one data directory (pods
/// overlapping on one volume, a test instance started with the default directory) would both deliver its outbox
/// (an order sent twice at a broker that takes a repeated client order id as a new order), each keep its own
/// dedup and rate windows, and refresh the same broker sessions. An advisory lock (`flock`) on `lock` in the
/// directory, released by the kernel when the process ends however it ends; the file names the holder's pid.
pub fn lock_data_dir(dir: &Path) -> Result<(), String> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let path = dir.join("lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns; it touches no memory.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            return Err(format!(
                "the data directory {} is in use by another server{who}: two servers on one data directory would \
                 both send its orders. Stop the other one, or give this one its own --data-dir",
                dir.display()
            ));
        }
        return Err(format!("cannot lock {}: {err}", path.display()));
    }
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = writeln!(file, "{}", std::process::id());
    // Held until the process exits: the lock lives as long as the descriptor.
    std::mem::forget(file);
    Ok(())
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

/// The file that says this data directory has had a database: written once the database is first created, so
/// that a database that later goes missing or empty is not taken for a fresh install.
pub const DATABASE_MARKER: &str = "database-created";

/// What is found where the database should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// No file.
    Missing,
    /// A file of 0 bytes, or an SQLite database without a single table.
    Empty,
    /// Something to open (if it is not a database, opening it says so).
    Present,
}

fn inspect(db: &Path) -> Result<Found, String> {
    let meta = match std::fs::metadata(db) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(format!("cannot read {}: {e}", db.display())),
    };
    if meta.len() == 0 {
        return Ok(Found::Empty);
    }
    // A database replaced by a new, empty one has a header and no tables. Anything that cannot be read this way
    // is left for the real open to report.
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let tables = rusqlite::Connection::open_with_flags(db, flags).and_then(|c| {
        c.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get::<_, i64>(0))
    });
    Ok(if matches!(tables, Ok(0)) { Found::Empty } else { Found::Present })
}

/// The database file's companions (SQLite's write-ahead log and its index).
fn companions(db: &Path) -> [std::path::PathBuf; 2] {
    let name = db.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    [db.with_file_name(format!("{name}-wal")), db.with_file_name(format!("{name}-shm"))]
}

/// Decides, before the database is opened, whether opening it may create a new one. A data directory that has
/// had a database (its [`DATABASE_MARKER`]) and now has none, or an empty one, is refused unless `fresh` says
/// to start over on purpose: rotated tokens, dedup keys and unsent orders live in that database, and starting
/// empty would let a rotated-away token answer again and process alerts a second time.
///
/// On success the database file exists with mode `0600` (SQLite gives its `-wal` and `-shm` files the mode of
/// the database), so that rotated tokens are never readable by others, whatever the umask.
pub fn prepare_database(data_dir: &Path, db: &Path, fresh: bool) -> Result<(), String> {
    let marker = data_dir.join(DATABASE_MARKER);
    let had_one = marker.exists();
    let found = inspect(db)?;
    if had_one && found != Found::Present {
        let what = if found == Found::Missing { "is missing" } else { "is empty" };
        if !fresh {
            return Err(format!(
                "the database {} {what}, but this data directory had one ({} records that). It holds the rotated \
                 webhook tokens, the dedup keys and the unsent orders: starting without it would let a rotated-away \
                 token answer again and process alerts a second time. Restore it from a backup, or start once with \
                 --fresh-database to begin with an empty database on purpose.",
                db.display(),
                marker.display()
            ));
        }
        tracing::warn!(db = %db.display(), "the database {what}; starting with an empty one (--fresh-database)");
        // Old write-ahead files must not be replayed into the new database.
        for f in companions(db) {
            let _ = std::fs::remove_file(f);
        }
        let _ = std::fs::remove_file(db);
    }
    if !db.exists() {
        write_private(db, b"").map_err(|e| format!("cannot create {}: {e}", db.display()))?;
    }
    restrict(db);
    Ok(())
}

/// Before a server of this data directory starts on a shared database (`--database`): its own SQLite database,
/// if it holds unsent orders or rotated tokens, is not carried over, and starting would silently leave them
/// behind (the rotated tokens' senders answered 404, the file's rotated-away token answering again, the orders
/// never sent nor reported). Refused unless `fresh` says to leave it on purpose; then it is set aside under
/// another name, so that a later start without `--database` does not bring its old rows back to life either.
pub fn leave_local_database(data_dir: &Path, fresh: bool) -> Result<(), String> {
    let db = data_dir.join("webhook.db");
    // Checked on the move only: a directory that started on the shared database before has been through it.
    if !db.is_file() || data_dir.join(SHARED_MARKER).exists() {
        return Ok(());
    }
    let count = |c: &rusqlite::Connection, sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap_or(0);
    let (unsent, rotated) = match rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    {
        Ok(c) => (
            count(&c, "SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')"),
            count(&c, "SELECT count(*) FROM token_overrides"),
        ),
        Err(_) => (0, 0),
    };
    if unsent == 0 && rotated == 0 {
        return Ok(());
    }
    if !fresh {
        return Err(format!(
            "this data directory's own database {} holds {unsent} unsent order(s) and {rotated} rotated token(s), \
             which the shared database does not have: starting on it would leave them behind (the rotated tokens' \
             senders answered 404, the tokens rotated away answering again, the orders never sent). Let this \
             server send its orders without --database first (failed ones can be dismissed), start once with \
             --fresh-database to leave the local database behind on purpose, and rotate the tokens again through \
             the shared database. (If this server has run on the shared database already, under a version that \
             did not check this, the file is an old leftover: --fresh-database sets it aside.)",
            db.display()
        ));
    }
    let aside = set_aside(data_dir, &db)?;
    tracing::warn!(db = %db.display(), aside = %aside.display(), unsent, rotated,
        "left this data directory's own database behind (--fresh-database): its unsent orders and rotated tokens are not carried over");
    Ok(())
}

/// Renames the database `db` and its companions to `webhook.db.left-{now}`, where no start takes them for its
/// database; returns the new name.
fn set_aside(data_dir: &Path, db: &Path) -> Result<std::path::PathBuf, String> {
    let aside = data_dir.join(format!("webhook.db.left-{}", crate::app::now_ms()));
    for (from, to) in std::iter::once((db.to_path_buf(), aside.clone()))
        .chain(companions(db).into_iter().zip(companions(&aside)))
        .filter(|(f, _)| f.exists())
    {
        std::fs::rename(&from, &to).map_err(|e| format!("cannot set {} aside: {e}", from.display()))?;
    }
    Ok(aside)
}

/// Written once a server of this data directory has started on the shared database: [`leave_local_database`]
/// looks at the local database on the move only, not at every later start.
pub const SHARED_MARKER: &str = "shared-database";

/// Before a server of this data directory starts on its own SQLite database (no `--database`): a directory that
/// has run on the shared database is refused unless `fresh` says to leave it on purpose (the marker then goes). A
/// fleet server restarted without its URL (an environment file gone missing) started on an empty database of its
/// own and answered 200: its own dedup window traded an alert retried across servers twice, its own rate window
/// and outbox ignored the others', and a token rotated away answered again.
pub fn leave_shared_database(data_dir: &Path, fresh: bool) -> Result<(), String> {
    let marker = data_dir.join(SHARED_MARKER);
    if !marker.exists() {
        return Ok(());
    }
    if !fresh {
        return Err(format!(
            "this data directory has run on a shared PostgreSQL database ({} records that), and this start gives \
             none (--database or SWH_DATABASE): on a database of its own this server would trade alerts the other \
             servers trade too, count its own rate window, and answer tokens rotated away. Start it with \
             --database, or once with --fresh-database to leave the shared database on purpose.",
            marker.display()
        ));
    }
    tracing::warn!("left the shared database behind (--fresh-database): this server now runs on its own database");
    // A database of its own from before the shared one (left in place at the move when it held nothing unsent)
    // is set aside too: started on, its old bot states and rows came back as if current.
    let db = data_dir.join("webhook.db");
    if db.is_file() {
        set_aside(data_dir, &db)?;
    }
    std::fs::remove_file(&marker).map_err(|e| format!("cannot remove {}: {e}", marker.display()))
}

/// Records that this data directory's server runs on the shared database (see [`SHARED_MARKER`]).
pub fn on_shared_database(data_dir: &Path) -> Result<(), String> {
    let marker = data_dir.join(SHARED_MARKER);
    if marker.exists() {
        return Ok(());
    }
    write_private(&marker, b"this data directory's server runs on a shared PostgreSQL (--database)\n")
        .map_err(|e| format!("cannot write {}: {e}", marker.display()))
}

/// After the database opened: records that this directory has one, and makes sure its files are `0600` (a
/// database created by an earlier version was `0644`).
pub fn database_opened(data_dir: &Path, db: &Path) -> Result<(), String> {
    restrict(db);
    for f in companions(db) {
        restrict(&f);
    }
    let marker = data_dir.join(DATABASE_MARKER);
    if !marker.exists() {
        let text = format!("{}\n", db.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        write_private(&marker, text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    }
    Ok(())
}

/// Makes a file readable by the owner only, if it exists.
fn restrict(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if path.exists() {
            if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
                tracing::warn!(file = %path.display(), error = %e, "cannot make the file private");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("swh-datadir-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_directory_that_ran_on_the_shared_database_does_not_start_on_its_own_without_saying_so() {
        let dir = temp_dir("shared");
        leave_shared_database(&dir, false).unwrap();
        on_shared_database(&dir).unwrap();
        let e = leave_shared_database(&dir, false).unwrap_err();
        assert!(e.contains("shared PostgreSQL database") && e.contains("--database"), "{e}");
        assert!(e.contains("--fresh-database"), "{e}");
        // A database of its own from before the shared one is set aside, not started on again.
        std::fs::write(dir.join("webhook.db"), b"old").unwrap();
        leave_shared_database(&dir, true).unwrap();
        assert!(!dir.join(SHARED_MARKER).exists());
        assert!(!dir.join("webhook.db").exists(), "the old database is set aside");
        let aside = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("webhook.db.left-"));
        assert!(aside);
        leave_shared_database(&dir, false).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_or_empty_database_is_refused_once_the_directory_had_one() {
        let dir = temp_dir("marker");
        let db = dir.join("webhook.db");
        // A fresh directory: the database may be created, and then the marker is written.
        prepare_database(&dir, &db, false).unwrap();
        rusqlite::Connection::open(&db).unwrap().execute_batch("CREATE TABLE t (x INTEGER);").unwrap();
        database_opened(&dir, &db).unwrap();
        assert!(dir.join(DATABASE_MARKER).exists());
        prepare_database(&dir, &db, false).unwrap();

        std::fs::write(&db, b"").unwrap();
        let e = prepare_database(&dir, &db, false).unwrap_err();
        assert!(e.contains("is empty") && e.contains("--fresh-database"), "{e}");
        std::fs::remove_file(&db).unwrap();
        let e = prepare_database(&dir, &db, false).unwrap_err();
        assert!(e.contains("is missing") && e.contains("--fresh-database"), "{e}");
        // A database without tables is empty too.
        rusqlite::Connection::open(&db).unwrap().execute_batch("PRAGMA user_version = 3;").unwrap();
        assert!(prepare_database(&dir, &db, false).unwrap_err().contains("is empty"));

        prepare_database(&dir, &db, true).unwrap();
        assert_eq!(std::fs::metadata(&db).unwrap().len(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn database_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("mode");
        let db = dir.join("webhook.db");
        prepare_database(&dir, &db, false).unwrap();
        let conn = rusqlite::Connection::open(&db).unwrap();
        let _: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);").unwrap();
        database_opened(&dir, &db).unwrap();
        for f in [db.clone(), dir.join("webhook.db-wal"), dir.join("webhook.db-shm"), dir.join(DATABASE_MARKER)] {
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
        drop(conn);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
