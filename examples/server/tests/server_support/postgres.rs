//! A real PostgreSQL for a test: Debian's `postgresql` package, `initdb` into a fresh directory under the system
//! temporary directory, listening on a free loopback port with trust authentication, stopped and removed on drop.
//!
//! PostgreSQL refuses to run as root, and the tests run as root on the project's machines: then the server programs
//! (`initdb`, `postgres`) run as the `postgres` system user that the Debian package creates, in a directory handed
//! to that user. The client programs (`pg_isready`, `createdb`, `psql`) run as the current user; with trust
//! authentication the database user is the one named on their command line (`swh`), whoever runs them.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The superuser `initdb` creates; every URL names it.
const USER: &str = "swh";

/// The database every cluster has from `initdb` on, which [`Postgres::url`] names.
const DEFAULT_DB: &str = "postgres";

/// How long the server has to accept connections after it was started.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Start attempts: another instance (or anything else on the machine) may take the chosen port between the probe
/// and PostgreSQL's own bind, and then the start is tried again on another port.
const START_ATTEMPTS: usize = 10;

/// A running PostgreSQL server, stopped and deleted on drop.
pub struct Postgres {
    /// The directory of `initdb`, `postgres`, `psql` and the other programs of one PostgreSQL version.
    bin: PathBuf,
    /// The temporary directory: the data directory, the Unix socket and the server's log.
    root: PathBuf,
    port: u16,
    server: Option<Child>,
}

impl Postgres {
    /// Creates a cluster in a fresh temporary directory and starts it on a free loopback port; returns once
    /// `pg_isready` answers that it accepts connections.
    ///
    /// Panics with what to do when PostgreSQL is not installed, and with the server's log when it does not start.
    pub fn start() -> Postgres {
        let bin = bin_dir().expect("PostgreSQL is not installed: run scripts/setup.sh");
        let owner = Owner::for_server();
        let root = temp_root(owner);
        std::fs::create_dir(&root).unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
        if let Owner::User { uid, gid } = owner {
            std::os::unix::fs::chown(&root, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("handing {} to the postgres user: {e}", root.display()));
        }
        // From here on, a panic's unwinding drops `pg`, which removes the directory.
        let mut pg = Postgres { bin, root, port: 0, server: None };
        let data = pg.root.join("data");
        // `--locale=C`: the machine's locale may not be generated, and byte order is the same everywhere.
        // `--no-sync`: a test cluster does not outlive the machine; the server's own commits go through the WAL as
        // in production.
        let initdb = owner
            .command(&pg.bin.join("initdb"), &pg.root)
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", USER, "--no-sync", "-E", "UTF8", "--locale=C"])
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", pg.bin.join("initdb").display()));
        check(&initdb, "initdb");

        let mut last_log = String::new();
        for _ in 0..START_ATTEMPTS {
            pg.port = free_port();
            let log = pg.root.join(format!("postgres-{}.log", pg.port));
            let log_file = std::fs::File::create(&log).unwrap();
            if let Owner::User { uid, gid } = owner {
                std::os::unix::fs::chown(&log, Some(uid), Some(gid)).unwrap();
            }
            let server = owner
                .command(&pg.bin.join("postgres"), &pg.root)
                .arg("-D")
                .arg(&data)
                .args(["-p", &pg.port.to_string()])
                .args(["-c", "listen_addresses=127.0.0.1"])
                .arg("-c")
                .arg(format!("unix_socket_directories={}", pg.root.display()))
                .args(["-c", "max_connections=200"])
                // For speed, nothing is flushed to disk (fsync, and with it full-page images, off): that matters only
                // when the machine itself crashes. Commits, isolation, locks and `synchronous_commit` are as in
                // production, so a killed process (which the tests do) loses nothing a real cluster would keep.
                .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
                // Several clusters may run side by side on a small machine.
                .args(["-c", "shared_buffers=32MB"])
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().unwrap())
                .stderr(log_file)
                .spawn()
                .unwrap_or_else(|e| panic!("running {}: {e}", pg.bin.join("postgres").display()));
            pg.server = Some(server);
            match pg.wait_ready() {
                Ready::Yes => return pg,
                Ready::Exited => {
                    last_log = std::fs::read_to_string(&log).unwrap_or_default();
                    // Only a port taken by someone else is worth another try.
                    if !last_log.contains("could not bind") {
                        panic!("PostgreSQL exited at start on port {}:\n{last_log}", pg.port);
                    }
                }
                Ready::TimedOut => panic!(
                    "PostgreSQL did not accept connections within {READY_WITHIN:?}:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            }
        }
        panic!("PostgreSQL found no free port in {START_ATTEMPTS} attempts:\n{last_log}");
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the server and all its processes: a database host that hangs,
    /// whose connections stay open and answer nothing.
    pub fn freeze(&self, frozen: bool) {
        let Some(server) = &self.server else { return };
        let root = server.id();
        let mut pids = vec![root];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // The parent's pid is the second field after the command's closing parenthesis.
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            if ppid == Some(root) {
                pids.push(pid);
            }
        }
        let signal = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        for pid in pids {
            // SAFETY: kill(2) on the postmaster this harness spawned and its children.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
    }

    /// The URL of the cluster's default database: `postgres://swh@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        self.url_of(DEFAULT_DB)
    }

    /// Creates a database (a name of lowercase letters, digits and underscores) and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        assert!(
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "a test database is named with lowercase letters, digits and underscores: {name:?}"
        );
        let out = command(&self.bin.join("createdb"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER, name])
            .output()
            .unwrap_or_else(|e| panic!("running createdb: {e}"));
        check(&out, &format!("createdb {name}"));
        self.url_of(name)
    }

    /// Runs one SQL statement in database `db` with `psql` and returns its rows, one line each, columns joined
    /// by `|` (for tests that look at what the servers stored).
    pub fn query(&self, db: &str, sql: &str) -> Vec<String> {
        self.query_url(&self.url_of(db), sql)
    }

    /// [`Postgres::query`] through a connection URL, as a server is given it.
    pub fn query_url(&self, url: &str, sql: &str) -> Vec<String> {
        let psql = self.bin.join("psql");
        let psql = if psql.exists() { psql } else { PathBuf::from("psql") };
        let out = command(&psql)
            .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
            .output()
            .unwrap_or_else(|e| panic!("running psql: {e}"));
        check(&out, &format!("psql {sql}"));
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
    }

    fn url_of(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Waits until the server accepts connections, it exits, or [`READY_WITHIN`] passes (then it is stopped).
    fn wait_ready(&mut self) -> Ready {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if self.server.as_mut().unwrap().try_wait().unwrap().is_some() {
                self.server = None;
                return Ready::Exited;
            }
            let ready = command(&self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER, "-d", DEFAULT_DB])
                .status()
                .unwrap_or_else(|e| panic!("running pg_isready: {e}"));
            if ready.success() {
                return Ready::Yes;
            }
            if Instant::now() > deadline {
                self.stop();
                return Ready::TimedOut;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Immediate shutdown (SIGQUIT to the postmaster, as `pg_ctl stop -m immediate` sends): the data is thrown away,
    /// so there is nothing to write back. Kills it if it has not gone within 10 s.
    fn stop(&mut self) {
        let Some(mut server) = self.server.take() else { return };
        if server.try_wait().ok().flatten().is_some() {
            return;
        }
        // SAFETY: kill(2) with a pid we spawned and have not reaped, so it is still ours.
        unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGQUIT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = server.kill();
                let _ = server.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// How a start ended.
enum Ready {
    Yes,
    Exited,
    TimedOut,
}

/// Who runs the server programs: the current user, or (when that is root) the `postgres` system user.
#[derive(Clone, Copy)]
enum Owner {
    Current,
    User { uid: u32, gid: u32 },
}

impl Owner {
    fn for_server() -> Owner {
        // SAFETY: geteuid cannot fail and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            return Owner::Current;
        }
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, "postgres"]).output().expect("running id");
            assert!(
                out.status.success(),
                "PostgreSQL refuses to run as root and there is no `postgres` user: run scripts/setup.sh"
            );
            String::from_utf8_lossy(&out.stdout).trim().parse().expect("a numeric id")
        };
        Owner::User { uid: id("-u"), gid: id("-g") }
    }

    /// A server program run as this owner, in `dir` (the current directory may be out of the postgres user's
    /// reach, and PostgreSQL's programs look it up).
    fn command(self, program: &Path, dir: &Path) -> Command {
        let mut c = command(program);
        c.current_dir(dir);
        if let Owner::User { uid, gid } = self {
            // What `runuser -u postgres --` does, without a PAM session: std drops the supplementary groups, then
            // sets the group and the user in the child before exec.
            c.uid(uid).gid(gid).env("HOME", dir).env("USER", "postgres").env("LOGNAME", "postgres");
        }
        c
    }
}

/// The `bin` directory of the newest PostgreSQL under /usr/lib/postgresql (Debian's layout), else the directory of
/// the `initdb` found on `PATH` (its symlinks resolved, so the other programs sit beside it).
fn bin_dir() -> Option<PathBuf> {
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: Vec<u32> = name.split('.').map(str::parse).collect::<Result<_, _>>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin);
    newest.or_else(|| {
        let path = std::env::var_os("PATH")?;
        let initdb = std::env::split_paths(&path).map(|d| d.join("initdb")).find(|p| p.is_file())?;
        std::fs::canonicalize(initdb).ok()?.parent().map(Path::to_path_buf)
    })
}

/// A new directory name, unique across instances and test processes, under the system temporary directory; under
/// /tmp when the server runs as the postgres user, which a `TMPDIR` of root's own may keep out.
fn temp_root(owner: Owner) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let base = match owner {
        Owner::Current => std::env::temp_dir(),
        Owner::User { .. } => PathBuf::from("/tmp"),
    };
    // Short: the Unix socket's path must fit in 107 bytes.
    base.join(format!("swh-pg-{}-{n}-{nanos:x}", std::process::id()))
}

/// A loopback port free a moment ago (the kernel's choice for port 0); PostgreSQL binds it soon after, and a
/// start that loses the race is tried again.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A PostgreSQL program with no `PG*` variable of the environment choosing another server, user, database or
/// data directory, and no standard input.
fn command(program: &Path) -> Command {
    let mut c = Command::new(program);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            c.env_remove(key);
        }
    }
    c.stdin(Stdio::null());
    c
}

fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
