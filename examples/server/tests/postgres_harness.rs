//! The test PostgreSQL (`server_support::postgres`): it starts from Debian's package (as the `postgres` user when the
//! tests run as root), answers on its URL and on a created database's URL, several run side by side on their own
//! ports, and a dropped one no longer listens.

mod server_support;

use server_support::postgres::Postgres;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The rows `sql` returns through `url`, one line each.
fn psql(pg: &Postgres, url: &str, sql: &str) -> String {
    pg.query_url(url, sql).join("\n")
}

/// The loopback address a `postgres://user@127.0.0.1:PORT/db` URL names.
fn addr(url: &str) -> SocketAddr {
    let host_port = url.split('@').nth(1).and_then(|rest| rest.split('/').next()).unwrap();
    host_port.parse().unwrap_or_else(|e| panic!("{url}: {e}"))
}

#[test]
fn starts_creates_a_database_answers_and_stops_on_drop() {
    let pg = Postgres::start();
    let url = pg.url();
    assert!(url.starts_with("postgres://swh@127.0.0.1:"), "{url}");
    assert_eq!(psql(&pg, &url, "SELECT 1"), "1");

    let db = pg.create_database("harness_db");
    assert_eq!(db, url.replace("/postgres", "/harness_db"));
    assert_eq!(psql(&pg, &db, "SELECT current_database(), current_user"), "harness_db|swh");
    // The tests' settings, and durable commits as in production.
    assert_eq!(psql(&pg, &db, "SHOW max_connections"), "200");
    assert_eq!(psql(&pg, &db, "SHOW synchronous_commit"), "on");
    assert_eq!(psql(&pg, &db, "SHOW server_encoding"), "UTF8");
    psql(&pg, &db, "CREATE TABLE t (k text PRIMARY KEY); INSERT INTO t VALUES ('a')");
    assert_eq!(psql(&pg, &db, "SELECT count(*) FROM t"), "1");
    // Its files live in a temporary directory of its own, which the drop removes.
    let data = std::path::PathBuf::from(psql(&pg, &db, "SHOW data_directory"));
    let root = data.parent().unwrap();
    assert!(root.file_name().unwrap().to_string_lossy().starts_with("swh-pg-") && data.is_dir(), "{}", data.display());

    let addr = addr(&url);
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok(), "listening before the drop");
    drop(pg);
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "{addr} still accepts connections after the drop"
    );
    assert!(!root.exists(), "{} is left after the drop", root.display());
}

#[test]
fn several_run_side_by_side_on_their_own_ports() {
    let all: Vec<Postgres> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..3).map(|_| s.spawn(Postgres::start)).collect();
        starts.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ports: Vec<u16> = all.iter().map(|pg| addr(&pg.url()).port()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "three servers, three ports");
    // Each is its own cluster: a table made in one is not in the others.
    psql(&all[0], &all[0].url(), "CREATE TABLE only_here (x int)");
    assert_eq!(psql(&all[0], &all[0].url(), "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'"), "1");
    for pg in &all[1..] {
        assert_eq!(psql(pg, &pg.url(), "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'"), "0");
    }
}
