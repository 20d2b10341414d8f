//! Starting the server as a new user would: `--help` describes the server, the data and strategies
//! directories default to the user's XDG directories whatever the working directory (the bundled demo only as
//! the source checkout's fallback), and the banner shows each strategy's webhook URL and Logs link.

mod server_support;

use serde_json::json;
use server_support::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts the server with only ports given, `HOME` and the XDG variables as `env` says, in directory `cwd`;
/// returns it and its banner. The caller stops and waits for the child ([`stop`]).
#[allow(clippy::zombie_processes)]
fn start_bare(root: &Path, cwd: &Path, env: &[(&str, &Path)]) -> (Child, String) {
    let stdout = root.join("stdout.txt");
    let mut cmd = Command::new(server_exe());
    cmd.current_dir(cwd)
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--port-file"])
        .arg(root.join("ports.json"))
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&stdout).unwrap_or_default();
        if text.contains("stop with Ctrl-C") {
            return (child, text);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no banner: {text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(mut child: Child) {
    // SIGTERM: a clean stop, so the database is closed before the directory is read again.
    // SAFETY: kill(2) on our own child's pid, which it has not been reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

#[test]
fn help_describes_the_server_and_its_default_directories() {
    let out = Command::new(server_exe()).arg("--help").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(text.starts_with("The strategy-webhook server:"), "{text}");
    assert!(text.contains("--data-dir") && text.contains("~/.local/share/strategy-webhook"), "{text}");
    assert!(text.contains("~/.config/strategy-webhook/strategies"), "{text}");
}

#[test]
fn defaults_follow_xdg_and_the_banner_links_every_strategy() {
    let dirs = Dirs::new("firstrun");
    let (home, elsewhere) = (dirs.root.join("home"), dirs.root.join("cwd"));
    std::fs::create_dir_all(&elsewhere).unwrap();

    // No user strategies: the bundled demo (this is a source checkout), data under ~/.local/share.
    let (child, banner) = start_bare(&dirs.root, &elsewhere, &[("HOME", &home)]);
    stop(child);
    let data = home.join(".local/share/strategy-webhook");
    assert!(data.join("admin-token").is_file() && data.join("webhook.db").is_file(), "{banner}");
    assert!(banner.contains(&format!("data         {}", data.display())), "{banner}");
    assert!(banner.contains("[demo-equities] active"), "{banner}");
    assert!(banner.contains("/webhooks/d4080c65a7ec92cae69c9e5e26b0bdc2bf10f18df4eee5217ef0d1eb5ec3874c"), "{banner}");
    assert!(banner.contains("/logs/demo-equities?token=<admin token>"), "{banner}");
    assert!(!elsewhere.join("target").exists(), "nothing is written where the server was started");

    // The user's strategies directory wins, XDG_DATA_HOME moves the data; every strategy is listed.
    let (config, xdg_data) = (dirs.root.join("config"), dirs.root.join("xdg-data"));
    let user = config.join("strategy-webhook/strategies");
    std::fs::create_dir_all(&user).unwrap();
    for (id, c) in [("first", 'a'), ("second one", 'b')] {
        let mut v = snapshot(id, &token(c));
        v["bots"] = json!([]);
        std::fs::write(user.join(format!("{c}.json")), v.to_string()).unwrap();
    }
    let env = [("HOME", home.as_path()), ("XDG_CONFIG_HOME", &config), ("XDG_DATA_HOME", &xdg_data)];
    let (child, banner) = start_bare(&dirs.root, &elsewhere, &env);
    stop(child);
    assert!(xdg_data.join("strategy-webhook/admin-token").is_file(), "{banner}");
    assert!(banner.contains(&format!("strategies   {} (2 loaded", user.display())), "{banner}");
    assert!(!banner.contains("demo-equities"), "{banner}");
    for (id, c) in [("first", 'a'), ("second%20one", 'b')] {
        assert!(banner.contains(&format!("/webhooks/{}", token(c))), "{banner}");
        assert!(banner.contains(&format!("/logs/{id}?token=<admin token>")), "{banner}");
    }
}

/// A strategy file saved with a UTF-8 byte order mark (Windows Notepad, PowerShell 5's `Set-Content -Encoding
/// UTF8`) was refused with "expected value at line 1 column 1": at start the strategy was not loaded, and a pause
/// saved that way was not applied, the previous active version staying live and trading. The bots and
/// notifications files saved that way stopped the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_saved_with_a_byte_order_mark_are_read() {
    let dirs = Dirs::new("firstrun-bom");
    let with_bom = |v: &serde_json::Value| [&b"\xEF\xBB\xBF"[..], v.to_string().as_bytes()].concat();
    let mut v = snapshot("bom", &token('b'));
    std::fs::write(dirs.strategies.join("bom.json"), with_bom(&v)).unwrap();
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, with_bom(&json!({ "paper-1": { "delivery": "paper" } }))).unwrap();
    let notifications = dirs.root.join("notifications.json");
    std::fs::write(&notifications, with_bom(&json!({ "bom": { "url": "http://127.0.0.1:9/hook" } }))).unwrap();
    let server =
        Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--notifications", notifications.to_str().unwrap()]);
    server.wait_for_strategies("the strategy saved with a BOM", |s| s.iter().any(|s| s["id"] == "bom")).await;

    // Paused in an editor that writes a BOM: the pause applies.
    v["status"] = json!("paused");
    std::fs::write(dirs.strategies.join("bom.json"), with_bom(&v)).unwrap();
    server
        .wait_for_strategies("the pause saved with a BOM", |s| {
            s.iter().any(|s| s["id"] == "bom" && s["status"] == "paused")
        })
        .await;
    let stderr = server.stop();
    assert!(!stderr.contains("strategy file not loaded"), "{stderr}");
}

/// A notifications entry under a strategy id no loaded strategy has (`demo-equites` for `demo-equities`) was
/// accepted silently: the real strategy never reported its failed or expired orders, and nothing said why.
#[test]
fn a_notifications_entry_for_no_loaded_strategy_is_reported() {
    let dirs = Dirs::new("firstrun-notify-typo");
    dirs.write("d.json", &snapshot("demo-equities", &token('d')));
    let notifications = dirs.root.join("notifications.json");
    std::fs::write(&notifications, json!({ "demo-equites": { "url": "http://127.0.0.1:9/hook" } }).to_string())
        .unwrap();
    let server = Server::start(&dirs, &["--notifications", notifications.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let line = loop {
        let err = server.stderr_text();
        if let Some(l) = err.lines().find(|l| l.contains("ERROR") && l.contains("`demo-equites`")) {
            break l.to_owned();
        }
        assert!(Instant::now() < deadline, "no ERROR names the unused entry: {err}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(line.contains("notifications file") && line.contains("demo-equities"), "{line}");
    server.stop();
}

/// Runs `cmd` (the server) expecting it to refuse to start; returns its standard error. A server that starts
/// anyway is killed after a while, so the test fails rather than hangs.
fn refused(mut cmd: Command, root: &Path) -> String {
    let stderr = root.join(format!("refused-{}.txt", std::fs::read_dir(root).unwrap().count()));
    let mut child = cmd
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started: {}", std::fs::read_to_string(&stderr).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(!status.success(), "{text}");
    text
}

/// A `--public-url` that is not https (`http://…`, or a bare host) was accepted on the HTTPS-only listener: the
/// banner and a rotation's answer gave senders a webhook URL they could not reach, and their alerts never came.
#[test]
fn a_public_url_that_is_not_https_is_refused() {
    let dirs = Dirs::new("firstrun-public-url");
    dirs.write("p.json", &snapshot("p", &token('e')));
    for bad in ["http://hooks.example.com", "hooks.example.com", "https://", "https:///webhooks"] {
        let mut cmd = Command::new(server_exe());
        cmd.arg("--strategies").arg(&dirs.strategies).arg("--data-dir").arg(&dirs.data).args(["--public-url", bad]);
        let err = refused(cmd, &dirs.root);
        assert!(err.contains("--public-url") && err.contains("https://"), "{bad}: {err}");
    }
    let server = Server::start(&dirs, &["--public-url", "https://hooks.example.com/"]);
    assert!(server.banner().contains(&format!("https://hooks.example.com/webhooks/{}", token('e'))));
    server.stop();
}

/// The console's page for a browser without the admin token said "the server prints the link when it starts",
/// and the README that the token was "printed at start": neither is printed unless `--show-admin-token` is
/// given, and a new user was left looking for it. The page names the file and the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_without_a_token_says_where_the_token_is() {
    let dirs = Dirs::new("firstrun-401");
    dirs.write("a.json", &snapshot("a", &token('a')));
    let server = Server::start(&dirs, &[]);
    let page = server.admin(hyper::Method::GET, "/logs/a", None, "", false).await;
    assert_eq!(page.status, 401);
    assert!(page.body.contains("admin-token") && page.body.contains("--show-admin-token"), "{}", page.body);
    assert!(!page.body.contains("prints the link when it starts"), "{}", page.body);
    server.stop();
}

/// With no HOME (a service account, a container, a cron job) and no XDG variable, the data directory fell back to
/// `strategy-webhook-data` in the working directory: started from another directory, the server ran on an empty
/// database, rotated-away tokens answered again, a retry of an alert already processed traded again, and the
/// orders the previous run left unsent stayed behind. It refuses to start and says what to do.
#[test]
fn no_home_and_no_data_dir_is_refused() {
    let dirs = Dirs::new("firstrun-no-home");
    let cwd = dirs.root.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let mut cmd = Command::new(server_exe());
    cmd.current_dir(&cwd)
        .env_remove("HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .arg("--strategies")
        .arg(&dirs.strategies);
    let err = refused(cmd, &dirs.root);
    assert!(err.contains("HOME") && err.contains("--data-dir"), "{err}");
    assert!(std::fs::read_dir(&cwd).unwrap().next().is_none(), "something was written in the working directory");
}
