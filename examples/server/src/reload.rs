//! Strategies from a directory of snapshot files, one per `*.json`, kept live by polling modification times.
//!
//! A changed file is loaded with [`crate::app::App::apply_snapshot`], which replaces the strategy by id and so
//! keeps its dedup and rate state. A deleted file removes its strategy. A file that does not load is logged with
//! the snapshot error and the version loaded before stays live. Polling needs no extra crate and, at one
//! `read_dir` a second, costs nothing next to the requests.

use crate::app::{App, SnapshotRefused};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use strategy_webhook::EngineError;

/// What was last seen of one file.
struct Seen {
    /// The file's [`Stamp`]: a change means the file changed.
    stamp: Stamp,
    /// The strategy id the file's live version defines, if it ever loaded.
    id: Option<String>,
    /// Its last version was refused for defining an id, or naming a token, another file has: tried again once
    /// an id or token is let go of (it keeps its previous id, if it had one, until then).
    clashed: bool,
    /// A digest of its bytes as last read: a file waiting for an id that holds the very bytes of the file that
    /// defined it is that file copied (a rename by copy and delete).
    content: Option<u64>,
}

/// A digest of a file's bytes, to tell a copy of a file (see [`Seen::content`]).
fn content_of(path: &Path) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let bytes = std::fs::read(path).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}

/// What two files may both claim: a strategy id, or a webhook token (`token_hash`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Claim {
    Id(String),
    Token(String),
}

impl std::fmt::Display for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Claim::Id(id) => write!(f, "strategy id {id}"),
            // The token is the webhook's credential: never shown.
            Claim::Token(_) => f.write_str("token_hash"),
        }
    }
}

/// Modification time, length and status-change time. The last changes with a `chmod` or `chown` alone: a file
/// the server could not read when it was edited is read again once its permissions are mended, where the
/// mtime and length alone never changed and the edit (a pause, say) never took effect.
type Stamp = (SystemTime, u64, (i64, i64));

/// The state of the strategies directory.
pub struct Loader {
    dir: PathBuf,
    files: HashMap<PathBuf, Seen>,
    /// Strategy ids and tokens that several files defined at start, with those files: none of them loads while
    /// more than one of them still defines the id (or token). In name order a copy (`demo copy.json`,
    /// `demo-old.json` sort before `demo.json`) won, and a restart silently traded the copy's old version
    /// (active again, its old sizing) over the edited original; a copy given another id but the same token took
    /// the original's webhook the same way. While running, the file seen first keeps an id or token, as before.
    contested: HashMap<Claim, std::collections::BTreeSet<PathBuf>>,
    /// Files seen before and missing now, with when they were first missed: an editor that saves by renaming the
    /// old file away and writing a new one leaves the path missing for a moment, and a scan in it unloaded the
    /// strategy (every alert 404 until the next scan) or handed its id to a copy waiting for it. A file is taken
    /// for deleted once it has been missing for [`Loader::gone_after`].
    missing: HashMap<PathBuf, std::time::Instant>,
    /// How long a file must be missing to count as deleted.
    pub gone_after: std::time::Duration,
    /// Files put off for defining the id of a missing file (a rename): once that one counts as deleted they load
    /// before any other file waiting for the id, or a stale copy refused beside the renamed file took it.
    renames: std::collections::HashSet<PathBuf>,
    /// A strategy was (re)loaded since the bots file's entries were last checked ([`Loader::check_bots_file`]).
    loaded_since_check: bool,
    /// The bots file's entries no strategy's bot had at the last check (`None` before the first).
    unused_entries: Option<Vec<String>>,
    /// The notifications file's entries no loaded strategy had at the last check (`None` before the first).
    unused_notifications: Option<Vec<String>>,
}

/// How long a strategy file must be missing before its strategy is removed.
pub const GONE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

impl Loader {
    /// A loader for `dir`; nothing is read until [`Loader::scan`].
    pub fn new(dir: PathBuf) -> Loader {
        Loader {
            dir,
            files: HashMap::new(),
            contested: HashMap::new(),
            missing: HashMap::new(),
            gone_after: GONE_AFTER,
            renames: Default::default(),
            loaded_since_check: false,
            unused_entries: None,
            unused_notifications: None,
        }
    }

    /// Applies every change since the last scan. Returns the number of strategies loaded from files.
    pub fn scan(&mut self, app: &App) -> usize {
        let now = match list(&self.dir) {
            Ok(n) => n,
            Err(e) => {
                // A directory that vanished for a moment (an editor's rename, a remount) must not unload
                // every strategy: keep what is live and look again next time.
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read the strategies directory");
                return self.loaded();
            }
        };
        // Whether a strategy id was let go of: a file refused for defining an id another file had may load now.
        let mut freed = false;
        let absent: Vec<PathBuf> = self.files.keys().filter(|p| !now.contains_key(*p)).cloned().collect();
        self.missing.retain(|p, _| absent.contains(p));
        let at = std::time::Instant::now();
        let mut gone = Vec::new();
        for path in absent {
            let since = *self.missing.entry(path.clone()).or_insert(at);
            if at.duration_since(since) >= self.gone_after {
                gone.push(path);
            }
        }
        for path in gone {
            self.missing.remove(&path);
            self.renames.remove(&path);
            let seen = self.files.remove(&path);
            // A file refused for its id going away may let another file with that id load.
            freed |= seen.as_ref().is_some_and(|s| s.clashed);
            // Its copy waiting for its id (copied, then deleted: the copy was scanned while this file was still
            // there, so it was no rename then) loads before any other waiting file, or a stale copy refused beside
            // it that sorts first took the id.
            if let Some(Seen { id: Some(id), clashed: false, content: Some(owner), .. }) = &seen {
                for (p, s) in &self.files {
                    if s.clashed && s.content == Some(*owner) && s.id.as_deref() != Some(id.as_str()) {
                        self.renames.insert(p.clone());
                    }
                }
            }
            if let Some(Seen { id: Some(id), .. }) = seen {
                // Unloaded, its windows kept: a file renamed is gone and new in one scan, and a retry of an alert
                // it took must still be a duplicate under the new name.
                if !self.owned_elsewhere(&id, &path) && app.unload(&id) {
                    freed = true;
                    tracing::info!(file = %path.display(), strategy = %id, "strategy removed (its file was deleted)");
                }
            }
        }
        if self.files.is_empty() {
            self.contested = contested(app, &now);
        } else {
            // A contested id or token goes back to the usual rule once one file is left defining it (the others
            // removed or changed): that one may load, unchanged as it is, so the waiting files are tried again.
            // A file missing for a moment, unreadable or not parsing (half-written by a save in place, a typo)
            // keeps its place: it has not been removed nor given another id or token, and dropping it let the
            // stale copy load and keep the id for good.
            let missing = &self.missing;
            self.contested.retain(|claim, files| {
                files.retain(|p| {
                    (now.contains_key(p) || missing.contains_key(p))
                        && std::fs::read(p).map_or(true, |b| {
                            let c = claims(app, &b);
                            c.is_empty() || c.contains(claim)
                        })
                });
                let still = files.len() > 1;
                freed |= !still;
                still
            });
        }
        let mut now: Vec<(PathBuf, Stamp)> = now.into_iter().collect();
        if self.files.is_empty() {
            // At start, of two strategies whose bots share an account (refused for the one loaded second), the one
            // that has traded there loads first and keeps it: by name alone, a file added beside a trading strategy
            // took its account at the next restart, its sync handed the other's positions. Otherwise name order.
            now.sort_by_key(|(path, _)| !std::fs::read(path).is_ok_and(|b| app.has_traded(&b)));
        }
        for (path, stamp) in now {
            if self.files.get(&path).is_some_and(|s| s.stamp == stamp) {
                continue;
            }
            let previous = self.files.get(&path).and_then(|s| s.id.clone());
            let (id, clashed) = self.load(app, &path, previous.as_deref());
            let renamed = clashed
                && std::fs::read(&path)
                    .ok()
                    .and_then(|b| peek_id(&b))
                    .is_some_and(|i| previous.as_deref() != Some(i.as_str()) && self.owned_only_by_missing(&i, &path));
            if renamed {
                self.renames.insert(path.clone());
            } else {
                self.renames.remove(&path);
            }
            // A file changed may have let go of an id, or of a token (given another one, or unloaded): a file
            // refused for either may load now.
            freed |= previous.is_some();
            let content = content_of(&path);
            self.files.insert(path, Seen { stamp, id, clashed, content });
        }
        // A file refused while another defined its id is unchanged, so the loop above skipped it: with the other
        // one deleted or changed (a rename by copy and delete; an edit that gives a file another file's id) the
        // strategy would stay unloaded, every alert a 404, and an edited file keep trading its old version.
        // Again while a pass lets an id go (a file that loads another id frees its old one, which a file still
        // waiting may want); at most once per file, so it ends.
        let mut passes = self.files.len();
        while freed && passes > 0 {
            passes -= 1;
            freed = false;
            let mut waiting: Vec<PathBuf> =
                self.files.iter().filter(|(_, s)| s.id.is_none() || s.clashed).map(|(p, _)| p.clone()).collect();
            // A renamed file first; then in name order, as files are loaded: of two waiting copies, the same one
            // wins every time.
            waiting.sort_by(|a, b| (!self.renames.contains(a), a).cmp(&(!self.renames.contains(b), b)));
            for path in waiting {
                let previous = self.files.get(&path).and_then(|s| s.id.clone());
                let (id, clashed) = self.load(app, &path, previous.as_deref());
                if !clashed {
                    self.renames.remove(&path);
                }
                freed |= previous.is_some() && id != previous;
                if let Some(seen) = self.files.get_mut(&path) {
                    seen.id = id;
                    seen.clashed = clashed;
                }
            }
        }
        self.check_bots_file(app);
        self.check_notifications_file(app);
        self.loaded_since_check = false;
        self.loaded()
    }

    /// An ERROR for each bots file entry no loaded strategy's bot has: at the first scan, after any (re)load,
    /// and when a strategy's removal leaves an entry unused. A mistyped key (`alp-lvie` for `alp-live`) left the
    /// bot on paper, its alerts `processed` and filled there while the account never traded, and nothing said so.
    /// Not a refusal to start: a strategy file that does not load (a typo in it) or comes later leaves its bots'
    /// entries unused for a while, and refusing would stop every other strategy over it.
    fn check_bots_file(&mut self, app: &App) {
        let strategies = app.engine.strategies();
        let in_use: std::collections::HashSet<&str> =
            strategies.iter().flat_map(|s| s.bots.iter().map(|b| &*b.id)).collect();
        let unused: Vec<String> = app.bots.unused(&in_use).into_iter().map(str::to_owned).collect();
        if self.loaded_since_check || self.unused_entries.as_ref() != Some(&unused) {
            for entry in &unused {
                tracing::error!(
                    "bots file: entry `{entry}` is used by no strategy's bot (a mistyped bot id? a bot the file \
                     does not list is delivered on paper)"
                );
            }
        }
        self.unused_entries = Some(unused);
    }

    /// An ERROR for each notifications file entry whose strategy id no loaded strategy has, naming the loaded
    /// ids: when [`Loader::check_bots_file`] checks, and for the same reasons. A mistyped id (`demo-equites`) was
    /// accepted silently, and the real strategy's failed and expired orders were never reported. Not a refusal
    /// to start, as for the bots file: the strategy may be a file that does not load yet.
    fn check_notifications_file(&mut self, app: &App) {
        let strategies = app.engine.strategies();
        let loaded: std::collections::HashSet<&str> = strategies.iter().map(|s| &*s.id).collect();
        let unused = crate::notify::unused(&loaded);
        let changed = self.loaded_since_check || self.unused_notifications.as_ref() != Some(&unused);
        if changed && !unused.is_empty() {
            let mut ids: Vec<&str> = loaded.iter().copied().collect();
            ids.sort_unstable();
            // The ids to compare the entry with; a server with hundreds of strategies names the first ones.
            let mut shown = if ids.is_empty() { "none".to_owned() } else { ids[..ids.len().min(20)].join(", ") };
            if ids.len() > 20 {
                shown.push_str(&format!(", … ({} in all)", ids.len()));
            }
            for entry in &unused {
                tracing::error!(
                    "notifications file: entry `{entry}` is for no loaded strategy (a mistyped strategy id? \
                     loaded: {shown}); no message is sent for it"
                );
            }
        }
        self.unused_notifications = Some(unused);
    }

    fn loaded(&self) -> usize {
        self.files.values().filter(|s| s.id.is_some()).count()
    }

    /// Whether the files other than `path` that define strategy `id` are all missing (a rename in progress).
    fn owned_only_by_missing(&self, id: &str, path: &Path) -> bool {
        self.files
            .iter()
            .filter(|(p, s)| *p != path && s.id.as_deref() == Some(id))
            .all(|(p, _)| self.missing.contains_key(p))
    }

    /// Whether another file than `path` defines strategy `id`.
    fn owned_elsewhere(&self, id: &str, path: &Path) -> bool {
        self.files.iter().any(|(p, s)| p != path && s.id.as_deref() == Some(id))
    }

    /// Loads one file; returns the id that is live for it afterwards, and whether it was refused for defining an
    /// id or token another file has (a file held back until it changes keeps its previous id, so it is never
    /// among the files tried again).
    fn load(&mut self, app: &App, path: &Path, previous: Option<&str>) -> (Option<String>, bool) {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot read a strategy file; keeping what was loaded");
                return (previous.map(str::to_owned), false);
            }
        };
        if let Some((claim, files)) = claims(app, &bytes).into_iter().find_map(|c| self.contested.get_key_value(&c)) {
            tracing::error!(
                file = %path.display(),
                "this file's {claim} is defined by {} files ({}); none of them is loaded until one is left",
                files.len(),
                files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            );
            return (previous.map(str::to_owned), true);
        }
        // Two files claiming one id would silently replace each other: refuse the newcomer.
        if let Some(id) = peek_id(&bytes) {
            if previous != Some(id.as_str()) && self.owned_elsewhere(&id, path) {
                if self.owned_only_by_missing(&id, path) {
                    // A rename: the old name is missing, not yet taken for deleted. Loaded once it is.
                    tracing::info!(file = %path.display(), strategy = %id, "the file defining this strategy id is missing; loaded from this one once that is gone");
                    return (previous.map(str::to_owned), true);
                }
                tracing::error!(file = %path.display(), strategy = %id, "another file already defines this strategy id; file ignored");
                return (previous.map(str::to_owned), true);
            }
        }
        let applied = app.apply_snapshot_replacing(&bytes, previous);
        // The file now defines another id with the webhook its own previous version holds (its token, or the one
        // rotated away from it). A new id is a new strategy: its own dedup and rate windows and bot states, so
        // taking the old one's webhook, a retry of an alert the old id took would trade again. Unloading the old
        // one would answer every alert 404 (a rename for tidiness would lose them all). The previous version
        // stays live, as for any file that does not load, and the ERROR says exactly why and what is not applied;
        // the file is held back until it changes (a token_hash of its own, or the old id back).
        let takes_webhook_of = match &applied {
            Err(SnapshotRefused::Engine(EngineError::TokenInUse(holder))) => Some(holder.as_str()),
            Err(SnapshotRefused::Retired { strategy }) => Some(strategy.as_str()),
            _ => None,
        };
        if let (Some(holder), Some(old)) = (takes_webhook_of, previous) {
            if holder == old {
                let new = peek_id(&bytes).unwrap_or_default();
                let refused = applied.as_ref().err().map(ToString::to_string).unwrap_or_default();
                tracing::error!(
                    file = %path.display(), strategy = %new, was = old, error = %refused,
                    "this file now defines another strategy id with the webhook of its previous id: a new id is a \
                     new strategy (its own dedup and rate windows and positions) and needs a token_hash of its \
                     own; the previous id stays live as it was loaded, and nothing of this version (its status \
                     and sizing included) applies until the file changes"
                );
                return (previous.map(str::to_owned), false);
            }
        }
        match applied {
            Ok(id) => {
                if let Some(old) = previous.filter(|old| *old != id) {
                    // The file now defines another strategy: the old one goes.
                    app.unload(old);
                }
                let verb = if previous.is_some() { "reloaded" } else { "loaded" };
                tracing::info!(file = %path.display(), strategy = %id, "strategy {verb}");
                unlisted_bots(app, &id);
                self.loaded_since_check = true;
                (Some(id), false)
            }
            Err(e) => {
                let kept = if previous.is_some() { "; the previous version stays live" } else { "" };
                tracing::error!(file = %path.display(), error = %e, "strategy file not loaded{kept}");
                // Refused for a token another file's strategy holds, or for another strategy's account: tried
                // again once a file lets go of its strategy (removed, or edited).
                let clashed = matches!(
                    e,
                    SnapshotRefused::Engine(EngineError::TokenInUse(_)) | SnapshotRefused::SharedAccount(_)
                );
                (previous.map(str::to_owned), clashed)
            }
        }
    }
}

/// An ERROR for each bot of strategy `id` that a given bots file does not list, as the strategy (re)loads: such
/// a bot trades on paper, which the operator who wrote a bots file may not mean (a mistyped key). Bots not listed
/// stay on paper, as without a bots file (the demo): a file may list only some bots on purpose.
fn unlisted_bots(app: &App, id: &str) {
    let Some(s) = app.engine.strategy(id) else { return };
    for bot in s.bots.iter().filter(|b| app.bots.unlisted(&b.id)) {
        tracing::error!(
            "bot `{}` (strategy `{id}`) is not in the bots file: its orders go to the paper broker, not to {}; \
             if it should trade there, add it to the bots file (or fix its key) and restart; to keep it on paper, \
             list it as `{{\"delivery\": \"paper\"}}`",
            bot.id,
            bot.broker.as_str()
        );
    }
}

/// `*.json` files in `dir` with their stamps, in name order so that loading is deterministic.
fn list(dir: &Path) -> std::io::Result<BTreeMap<PathBuf, Stamp>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let hidden = path.file_name().and_then(|n| n.to_str()).map_or(true, |n| n.starts_with('.'));
        if hidden || path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        // Followed through a symbolic link (a ConfigMap mount, a link into a checkout): the entry's own
        // metadata is the link's, never a file, and its stamp would not change with the file linked to.
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if !meta.is_file() {
            continue;
        }
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        out.insert(path, (mtime, meta.len(), changed(&meta)));
    }
    Ok(out)
}

/// The status-change time (see [`Stamp`]).
#[cfg(unix)]
fn changed(meta: &std::fs::Metadata) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (meta.ctime(), meta.ctime_nsec())
}

#[cfg(not(unix))]
fn changed(_: &std::fs::Metadata) -> (i64, i64) {
    (0, 0)
}

/// The strategy ids and tokens that more than one of `files` defines, with those files.
fn contested(app: &App, files: &BTreeMap<PathBuf, Stamp>) -> HashMap<Claim, std::collections::BTreeSet<PathBuf>> {
    let mut by_claim: HashMap<Claim, std::collections::BTreeSet<PathBuf>> = HashMap::new();
    for path in files.keys() {
        let bytes = std::fs::read(path).ok();
        let mut found = bytes.as_deref().map(|b| claims(app, b)).unwrap_or_default();
        if found.is_empty() {
            // A file that does not parse (a typo, a save in place half-written) still says what it claims: left out,
            // a stale copy beside it was alone with the id and loaded, and kept it once the file was fixed.
            found = bytes.as_deref().map(loose_claims).unwrap_or_default();
        }
        for claim in found {
            by_claim.entry(claim).or_default().insert(path.clone());
        }
    }
    by_claim.retain(|_, files| files.len() > 1);
    by_claim
}

/// The id and token of a snapshot, read leniently (only to detect two files claiming one of them). The token is
/// the one the strategy answers to: the one rotated to its id through the admin API, if any, else the file's.
fn claims(app: &App, bytes: &[u8]) -> Vec<Claim> {
    let Some((id, token)) = peek(bytes) else { return Vec::new() };
    let token = id.as_deref().and_then(|id| app.rotated_token(id)).or(token);
    id.map(Claim::Id).into_iter().chain(token.map(Claim::Token)).collect()
}

/// The top-level `"id": "…"` and `"token_hash": "…"` of a file that does not parse, read as text: what it claims.
/// Only the shallowest: a bot's id equal to another strategy's id held that healthy strategy back. Where the typo
/// throws the structure out of step (a quote left open), no id may be found as a key at all: every `"id"` the
/// text holds is claimed then, holding back loudly rather than letting a stale copy load.
fn loose_claims(bytes: &[u8]) -> Vec<Claim> {
    let text = String::from_utf8_lossy(bytes);
    let (keyed, in_step) = keyed_claims(&text);
    // The shallowest ids, where the strings stay in step (a trailing comma, a brace left open): the strategy's (a
    // bot's id equal to another strategy's held it back). A quote left open may have hidden the strategy's own id
    // while showing its bots': every id the text holds is claimed then, holding back loudly rather than letting a
    // stale copy load.
    let shallowest = keyed.iter().filter(|(_, c)| matches!(c, Claim::Id(_))).map(|(d, _)| *d).min();
    if let Some(depth) = shallowest.filter(|_| in_step) {
        let mut out: Vec<Claim> = Vec::new();
        for (_, c) in keyed.into_iter().filter(|(d, _)| *d == depth) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
        return out;
    }
    let mut out: Vec<Claim> = keyed.into_iter().map(|(_, c)| c).collect();
    for (key, make) in [("\"id\"", Claim::Id as fn(String) -> Claim), ("\"token_hash\"", Claim::Token)] {
        let mut rest = text.as_ref();
        while let Some(i) = rest.find(key) {
            rest = &rest[i + key.len()..];
            if let Some(v) = string_after_key(rest) {
                let claim = make(v.to_owned());
                if !out.contains(&claim) {
                    out.push(claim);
                }
            }
        }
    }
    out
}

/// The string value after a key's closing quote (`: "…"`), when it is a non-empty string.
fn string_after_key(rest: &str) -> Option<&str> {
    let value = rest.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    value.split_once('"').map(|(v, _)| v).filter(|v| !v.is_empty())
}

/// The `id` and `token_hash` keys of the text's structure, each with its depth (1 at the top level), and whether its
/// strings stay in step to its end (no string left open). A brace left open only pushes the keys after it a level
/// down, the strategy's id still the shallowest; a quote left open turns every later string inside out, and can
/// hide the strategy's id while its bots' show.
fn keyed_claims(text: &str) -> (Vec<(usize, Claim)>, bool) {
    let mut out = Vec::new();
    let mut open_string = false;
    let (mut depth, mut chars) = (0usize, text.char_indices().peekable());
    while let Some((i, c)) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            '"' => {
                // A string: read to its closing quote, escapes skipped.
                let start = i + 1;
                let mut end = start;
                open_string = true;
                while let Some((j, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => {
                            end = j;
                            open_string = false;
                            break;
                        }
                        _ => {}
                    }
                }
                let key = &text[start..end];
                if !(key == "id" || key == "token_hash") {
                    continue;
                }
                // A key: its value, when it is a string.
                if let Some(v) = string_after_key(&text[end + 1..]) {
                    let claim = if key == "id" { Claim::Id(v.to_owned()) } else { Claim::Token(v.to_owned()) };
                    out.push((depth, claim));
                }
            }
            _ => {}
        }
    }
    (out, !open_string)
}

/// The `id` and `token_hash` of a snapshot as the file gives them.
fn peek(bytes: &[u8]) -> Option<(Option<String>, Option<String>)> {
    #[derive(serde::Deserialize)]
    struct Claims {
        id: Option<String>,
        token_hash: Option<String>,
    }
    // As the core reads the file (a leading byte order mark dropped): else a file saved with one claimed nothing,
    // and two files defining one id were not told apart.
    serde_json::from_slice::<Claims>(crate::bots::without_bom(bytes)).ok().map(|c| (c.id, c.token_hash))
}

/// The `id` of a snapshot, read leniently (only to detect two files claiming one id).
fn peek_id(bytes: &[u8]) -> Option<String> {
    peek(bytes).and_then(|(id, _)| id)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use strategy_webhook::Decision;

    /// At start the files were loaded in name order, and of two defining one id the first won: a copy (`demo
    /// copy.json` sorts before `demo.json`) put its old version live over the edited original, paused there.
    /// Neither loads now, until one of them goes.
    #[tokio::test]
    async fn at_start_two_files_with_one_id_load_neither_until_one_goes() {
        let (dir, store, app, strategies) = with_strategies("contested");
        let (demo, _, paused) = paused_demo();
        std::fs::write(strategies.join("demo.json"), paused.to_string()).unwrap();
        std::fs::write(strategies.join("demo copy.json"), demo.to_string()).unwrap();
        let id = demo["id"].as_str().unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        // Removed at once, as these tests remove files for good.
        loader.gone_after = std::time::Duration::ZERO;
        let mut other = demo.clone();
        other["id"] = serde_json::json!("other");
        other["token_hash"] = serde_json::json!("e".repeat(64));
        std::fs::write(strategies.join("other.json"), other.to_string()).unwrap();
        assert_eq!(loader.scan(&app), 1);
        assert!(app.engine.strategy(id).is_none(), "a contested id is loaded");
        // Another file let go of does not let the copy in (the waiting files are tried again then).
        std::fs::remove_file(strategies.join("other.json")).unwrap();
        assert_eq!(loader.scan(&app), 0);
        assert!(app.engine.strategy(id).is_none(), "the copy loaded once another id was freed");
        // The copy given another id: the original, unchanged, loads.
        let mut renamed = demo.clone();
        renamed["id"] = serde_json::json!("demo-old");
        renamed["token_hash"] = serde_json::json!("d".repeat(64));
        std::fs::write(strategies.join("demo copy.json"), renamed.to_string()).unwrap();
        assert_eq!(loader.scan(&app), 2);
        assert_eq!(app.engine.strategy(id).unwrap().status.as_str(), "paused", "the original's version");
        // Or, from the start again, the copy removed.
        let (dir2, store2, app2) = crate::app::tests::temp_app("contested2");
        let strategies = dir2.join("strategies");
        std::fs::create_dir_all(&strategies).unwrap();
        std::fs::write(strategies.join("demo.json"), paused.to_string()).unwrap();
        std::fs::write(strategies.join("demo copy.json"), demo.to_string()).unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        // Removed at once, as these tests remove files for good.
        loader.gone_after = std::time::Duration::ZERO;
        assert_eq!(loader.scan(&app2), 0);
        std::fs::remove_file(strategies.join("demo copy.json")).unwrap();
        assert_eq!(loader.scan(&app2), 1);
        assert_eq!(app2.engine.strategy(id).unwrap().status.as_str(), "paused", "the remaining file's version");
        store2.close().await.unwrap();
        std::fs::remove_dir_all(dir2).unwrap();
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An App on a temporary store, and an empty strategies directory inside its directory.
    fn with_strategies(name: &str) -> (PathBuf, crate::store::Store, crate::app::App, PathBuf) {
        let (dir, store, app) = crate::app::tests::temp_app(name);
        let strategies = dir.join("strategies");
        std::fs::create_dir_all(&strategies).unwrap();
        (dir, store, app, strategies)
    }

    fn demo() -> serde_json::Value {
        serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap()
    }

    /// The demo strategy, its id, and the same strategy paused (the live file of the stale-copy tests).
    fn paused_demo() -> (serde_json::Value, String, serde_json::Value) {
        let demo = demo();
        let id = demo["id"].as_str().unwrap().to_owned();
        let mut paused = demo.clone();
        paused["status"] = serde_json::json!("paused");
        (demo, id, paused)
    }

    /// The id of the strategy `token` routes to, if any.
    fn owner(app: &crate::app::App, token: &str) -> Option<String> {
        app.engine.route(token.as_bytes()).ok().map(|s| s.id.to_string())
    }

    /// A copy of a file given another id (and a bigger size) but the same token: refused while running, the
    /// original keeping its webhook. At a restart, name order decided, and `demo (copy).json` sorts before
    /// `demo.json`: the copy took the original's webhook and traded its size. Neither loads now until one of
    /// them is left with that token.
    #[tokio::test]
    async fn at_start_two_files_with_one_token_load_neither_until_one_is_left() {
        let (dir, store, app, strategies) = with_strategies("token-contested");
        let original = demo();
        let token = original["token_hash"].as_str().unwrap().to_owned();
        std::fs::write(strategies.join("demo.json"), original.to_string()).unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        // Removed at once, as these tests remove files for good.
        loader.gone_after = std::time::Duration::ZERO;
        assert_eq!(loader.scan(&app), 1);
        let mut copy = demo();
        copy["id"] = serde_json::json!("demo-equities-v2");
        copy["bots"][0]["sizing"] = serde_json::json!({ "fixed_quantity": "1000" });
        std::fs::write(strategies.join("demo (copy).json"), copy.to_string()).unwrap();
        assert_eq!(loader.scan(&app), 1);
        assert_eq!(owner(&app, &token).as_deref(), Some("demo-equities"), "running: the file seen first keeps it");
        // A restart.
        let (dir2, store2, app2) = crate::app::tests::temp_app("token-contested2");
        let mut loader = super::Loader::new(strategies.clone());
        // Removed at once, as these tests remove files for good.
        loader.gone_after = std::time::Duration::ZERO;
        assert_eq!(loader.scan(&app2), 0);
        assert_eq!(owner(&app2, &token), None, "a file sharing its token with another is loaded");
        // The copy given a token of its own: both load, each with its own webhook.
        copy["token_hash"] = serde_json::json!("e".repeat(64));
        // File times tick at the kernel's coarse clock: a few milliseconds.
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(strategies.join("demo (copy).json"), copy.to_string()).unwrap();
        assert_eq!(loader.scan(&app2), 2);
        assert_eq!(owner(&app2, &token).as_deref(), Some("demo-equities"));
        assert_eq!(owner(&app2, &"e".repeat(64)).as_deref(), Some("demo-equities-v2"));
        store2.close().await.unwrap();
        std::fs::remove_dir_all(dir2).unwrap();
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A strategy whose token was rotated answers to the rotated token, not to its file's: a file naming the
    /// file's old token (rotated away) contests nothing with it at start, and the rotated strategy loads.
    #[tokio::test]
    async fn at_start_a_rotated_strategy_is_not_contested_by_a_file_with_its_old_token() {
        let (dir, store, app, strategies) = with_strategies("token-rotated-contest");
        let original = demo();
        let old_token = original["token_hash"].as_str().unwrap().to_owned();
        std::fs::write(strategies.join("demo.json"), original.to_string()).unwrap();
        assert_eq!(super::Loader::new(strategies.clone()).scan(&app), 1);
        app.rotate("demo-equities").await.unwrap();
        let rotated = app.rotated_token("demo-equities").unwrap();
        let mut second = demo();
        second["id"] = serde_json::json!("second");
        std::fs::write(strategies.join("b.json"), second.to_string()).unwrap();
        // A restart: nothing loaded, the rotation kept.
        app.unload("demo-equities");
        assert_eq!(super::Loader::new(strategies.clone()).scan(&app), 1);
        assert_eq!(owner(&app, &rotated).as_deref(), Some("demo-equities"));
        assert_eq!(owner(&app, &old_token), None, "the token rotated away answers");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A file edited to another id (and paused) with its webhook unchanged: the engine refused the new id for the
    /// token the file's own old version held, and the ERROR blamed "another strategy". Taking the webhook over,
    /// the new id would start without the old one's dedup window, and a retry of an alert the old id took would
    /// trade again; unloading the old one would answer every alert 404. The old version stays live (nothing of
    /// the edit applies, as the ERROR says), the retry is a duplicate, and the file is held until it changes;
    /// given a token of its own, the new id loads in place of the old. The same for a rotated strategy.
    #[tokio::test]
    async fn a_file_edited_to_another_id_with_its_webhook_keeps_the_old_one_until_it_has_its_own() {
        for rotated in [false, true] {
            let (dir, store, app, strategies) = with_strategies("id-edit-same-token");
            let original = demo();
            std::fs::write(strategies.join("demo.json"), original.to_string()).unwrap();
            let mut loader = super::Loader::new(strategies.clone());
            // Removed at once, as these tests remove files for good.
            loader.gone_after = std::time::Duration::ZERO;
            assert_eq!(loader.scan(&app), 1);
            let token = if rotated {
                app.rotate("demo-equities").await.unwrap();
                app.rotated_token("demo-equities").unwrap()
            } else {
                original["token_hash"].as_str().unwrap().to_owned()
            };
            let buy = br#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"bar-1"}}"#;
            assert_eq!(
                app.engine.deliver(token.as_bytes(), buy, Some("application/json"), 1).decision,
                Decision::Processed
            );
            let mut edited = demo();
            edited["id"] = serde_json::json!("demo-equities-2026");
            edited["status"] = serde_json::json!("paused");
            std::fs::write(strategies.join("demo.json"), edited.to_string()).unwrap();
            assert_eq!(loader.scan(&app), 1, "rotated: {rotated}");
            assert_eq!(owner(&app, &token).as_deref(), Some("demo-equities"), "rotated: {rotated}");
            assert!(app.engine.strategy("demo-equities-2026").is_none(), "the new id took the webhook");
            let retry = app.engine.deliver(token.as_bytes(), buy, Some("application/json"), 1_000);
            assert_eq!(retry.decision, Decision::Duplicate, "the retry traded again (rotated: {rotated})");
            // Not taken up when another file lets a token go.
            let mut other = demo();
            other["id"] = serde_json::json!("other");
            other["token_hash"] = serde_json::json!("c".repeat(64));
            std::fs::write(strategies.join("other.json"), other.to_string()).unwrap();
            assert_eq!(loader.scan(&app), 2);
            std::fs::remove_file(strategies.join("other.json")).unwrap();
            assert_eq!(loader.scan(&app), 1);
            assert!(app.engine.strategy("demo-equities-2026").is_none(), "the held file loaded (rotated: {rotated})");
            // Its own token: the new id loads in place of the old.
            edited["token_hash"] = serde_json::json!("e".repeat(64));
            std::thread::sleep(std::time::Duration::from_millis(30));
            std::fs::write(strategies.join("demo.json"), edited.to_string()).unwrap();
            assert_eq!(loader.scan(&app), 1);
            assert_eq!(owner(&app, &"e".repeat(64)).as_deref(), Some("demo-equities-2026"));
            assert_eq!(owner(&app, &token), None, "the old id is still live");
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    /// Two files with one token: the second is refused. The first given a token of its own frees the token, and
    /// the refused file loads then, as one refused for an id does once that id is let go of: it stayed unloaded,
    /// its webhook answering 404, until it was touched or the server restarted.
    #[tokio::test]
    async fn a_file_refused_for_its_token_loads_once_the_token_is_free() {
        let (dir, store, app, strategies) = with_strategies("token-freed");
        let original = demo();
        let token = original["token_hash"].as_str().unwrap().to_owned();
        std::fs::write(strategies.join("a.json"), original.to_string()).unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        // Removed at once, as these tests remove files for good.
        loader.gone_after = std::time::Duration::ZERO;
        assert_eq!(loader.scan(&app), 1);
        let mut second = demo();
        second["id"] = serde_json::json!("second");
        std::fs::write(strategies.join("b.json"), second.to_string()).unwrap();
        assert_eq!(loader.scan(&app), 1, "refused while a.json holds the token");
        let mut moved = demo();
        moved["token_hash"] = serde_json::json!("e".repeat(64));
        // File times tick at the kernel's coarse clock: a few milliseconds.
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(strategies.join("a.json"), moved.to_string()).unwrap();
        assert_eq!(loader.scan(&app), 2);
        assert_eq!(owner(&app, &token).as_deref(), Some("second"));
        assert_eq!(owner(&app, &"e".repeat(64)).as_deref(), Some("demo-equities"));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An edit the server could not read (the file written by another user, mode 600) was recorded under the
    /// file's new stamp and never read again: a `chmod` or `chown` alone changes neither the modification time
    /// nor the length, so the pause the edit made never took effect. The stamp changes with them now.
    #[cfg(unix)]
    #[test]
    fn a_permission_change_alone_changes_a_files_stamp() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("swh-stamp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("s.json");
        std::fs::write(&file, b"{}").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let before = super::list(&dir).unwrap()[&file];
        // File times tick at the kernel's coarse clock: a few milliseconds.
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let after = super::list(&dir).unwrap()[&file];
        assert_eq!((before.0, before.1), (after.0, after.1), "the contents did not change");
        assert_ne!(before, after, "a chmod alone must change the stamp");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// At start two files define one id, so neither loads. The operator's real file was read once while half-written
    /// (a save in place) or with a typo: the contest was dropped for good, the stale copy loaded, and the real file,
    /// complete again, was refused for the id the copy then held. A file that does not parse keeps its place.
    #[tokio::test]
    async fn a_contested_file_read_half_written_keeps_its_place_in_the_contest() {
        let (dir, store, app, strategies) = with_strategies("contest-half");
        let (demo, _, paused) = paused_demo();
        std::fs::write(strategies.join("demo.json"), paused.to_string()).unwrap();
        std::fs::write(strategies.join("demo copy.json"), demo.to_string()).unwrap();
        let id = demo["id"].as_str().unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        assert_eq!(loader.scan(&app), 0, "contested: neither loads");
        // demo.json re-saved in place (truncate, then write): the scan reads its first half.
        let full = paused.to_string();
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(strategies.join("demo.json"), &full[..full.len() / 2]).unwrap();
        loader.scan(&app);
        // The write completes.
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(strategies.join("demo.json"), &full).unwrap();
        loader.scan(&app);
        let live = app.engine.strategy(id).map(|s| s.status.as_str().to_owned());
        assert_ne!(live.as_deref(), Some("active"), "the stale copy (active) is live; demo.json (paused) refused");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An editor that saves by renaming the old file away and writing a new one leaves the path missing for a
    /// moment. A scan in that moment unloaded the strategy: every alert 404 until the next scan. A file counts as
    /// deleted once it has been missing for `gone_after`.
    #[tokio::test]
    async fn a_file_missing_for_a_moment_keeps_its_strategy() {
        let (dir, store, app, strategies) = with_strategies("vanish");
        let demo = demo();
        let token = demo["token_hash"].as_str().unwrap().to_owned();
        std::fs::write(strategies.join("demo.json"), demo.to_string()).unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        assert_eq!(loader.scan(&app), 1);
        // vim: rename demo.json -> demo.json~, then write the new demo.json; the scan lands in between.
        std::fs::rename(strategies.join("demo.json"), strategies.join("demo.json~")).unwrap();
        loader.scan(&app);
        let buy = br#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"bar-9"}}"#;
        let out = app.engine.deliver(token.as_bytes(), buy, Some("application/json"), 1);
        std::fs::write(strategies.join("demo.json"), demo.to_string()).unwrap();
        std::fs::remove_file(strategies.join("demo.json~")).unwrap();
        loader.scan(&app);
        assert_eq!(out.http_status, 200, "an alert during the save was answered {}", out.http_status);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Running, with a stale copy refused beside the live file: a save of the live file by rename-and-write that a
    /// scan caught in between handed the id to the copy for good.
    #[tokio::test]
    async fn a_file_missing_for_a_moment_does_not_hand_its_id_to_a_waiting_copy() {
        let (dir, store, app, strategies) = with_strategies("vanish-copy");
        let (demo, id, paused) = paused_demo();
        std::fs::write(strategies.join("demo.json"), paused.to_string()).unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        assert_eq!(loader.scan(&app), 1);
        std::fs::write(strategies.join("demo-old.json"), demo.to_string()).unwrap();
        assert_eq!(loader.scan(&app), 1, "the copy is refused while running");
        assert_eq!(app.engine.strategy(&id).unwrap().status.as_str(), "paused");
        // An editor saves demo.json (unchanged content): rename away, the scan, then the new file.
        std::fs::rename(strategies.join("demo.json"), strategies.join("demo.json~")).unwrap();
        loader.scan(&app);
        std::fs::write(strategies.join("demo.json"), paused.to_string()).unwrap();
        std::fs::remove_file(strategies.join("demo.json~")).unwrap();
        loader.scan(&app);
        loader.scan(&app);
        assert_eq!(app.engine.strategy(&id).unwrap().status.as_str(), "paused", "the stale copy is live");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A live file renamed while a stale copy waits beside it: the renamed file was put off until the old name
    /// counted as deleted, and then the waiting files loaded in name order, the stale copy (active, its old
    /// sizing) first. The renamed file loads first. So does a file renamed by copy and delete with a scan between
    /// the two (the copy refused while the original is there, so it was no rename then).
    #[tokio::test]
    async fn a_rename_with_a_stale_copy_waiting_keeps_the_renamed_file() {
        for copy_then_delete in [false, true] {
            let (dir, store, app, strategies) =
                with_strategies(if copy_then_delete { "copy-delete" } else { "rename" });
            let (demo, id, paused) = paused_demo();
            std::fs::write(strategies.join("demo.json"), paused.to_string()).unwrap();
            let mut loader = super::Loader::new(strategies.clone());
            loader.gone_after = std::time::Duration::from_millis(100);
            assert_eq!(loader.scan(&app), 1);
            std::fs::write(strategies.join("demo-backup.json"), demo.to_string()).unwrap();
            assert_eq!(loader.scan(&app), 1, "the stale copy is refused while running");
            if copy_then_delete {
                std::fs::copy(strategies.join("demo.json"), strategies.join("prod.json")).unwrap();
                loader.scan(&app);
                std::fs::remove_file(strategies.join("demo.json")).unwrap();
            } else {
                std::fs::rename(strategies.join("demo.json"), strategies.join("prod.json")).unwrap();
            }
            loader.scan(&app);
            std::thread::sleep(std::time::Duration::from_millis(150));
            loader.scan(&app);
            loader.scan(&app);
            let live = app.engine.strategy(&id).map(|s| s.status.as_str().to_owned());
            assert_eq!(
                live.as_deref(),
                Some("paused"),
                "copy then delete {copy_then_delete}: the stale copy took the id"
            );
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    /// At start a file that does not parse (a typo) keeps its place in the contest for the id it holds: left out,
    /// the stale copy beside it was alone with the id, loaded active, and kept it once the file was fixed.
    #[tokio::test]
    async fn at_start_a_file_with_a_typo_keeps_a_stale_copy_from_loading() {
        let (dir, store, app, strategies) = with_strategies("start-typo");
        let (demo, id, paused) = paused_demo();
        let full = paused.to_string();
        std::fs::write(strategies.join("demo.json"), format!("{full},")).unwrap();
        std::fs::write(strategies.join("demo copy.json"), demo.to_string()).unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        loader.scan(&app);
        assert!(app.engine.strategy(&id).is_none(), "neither loads while both claim the id");
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(strategies.join("demo.json"), &full).unwrap();
        loader.scan(&app);
        loader.scan(&app);
        let live = app.engine.strategy(&id).map(|s| s.status.as_str().to_owned());
        assert_ne!(live.as_deref(), Some("active"), "the stale copy is live, the fixed file refused");
        // The copy removed: the edited file loads.
        std::fs::remove_file(strategies.join("demo copy.json")).unwrap();
        loader.gone_after = std::time::Duration::from_millis(10);
        loader.scan(&app);
        std::thread::sleep(std::time::Duration::from_millis(30));
        loader.scan(&app);
        let live = app.engine.strategy(&id).map(|s| s.status.as_str().to_owned());
        assert_eq!(live.as_deref(), Some("paused"));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A file with a typo that leaves its strings in step (a trailing comma, a brace left open) claims only the
    /// strategy's own id: a bot of it whose id is another strategy's id held that healthy strategy back at start
    /// (every alert to it 404). A quote left open claims every id its text holds (the test below).
    #[tokio::test]
    async fn a_typo_files_bot_id_holds_no_other_strategy_back() {
        for (name, from, to) in
            [("typo-bot-id", "}]", "}],"), ("brace-bot-id", "\"fixed_quantity\":\"10\"}", "\"fixed_quantity\":\"10\"")]
        {
            let (dir, store, app, strategies) = with_strategies(name);
            let demo = demo();
            let id = demo["id"].as_str().unwrap().to_owned();
            std::fs::write(strategies.join("demo.json"), demo.to_string()).unwrap();
            let mut other = demo.clone();
            other["id"] = serde_json::json!("other-strategy");
            other["token_hash"] = serde_json::json!("e".repeat(64));
            other["bots"][0]["id"] = serde_json::json!(id.clone());
            let full = other.to_string();
            let typo = full.replacen(from, to, 1);
            assert_ne!(typo, full, "{name}");
            std::fs::write(strategies.join("other.json"), &typo).unwrap();
            let mut loader = super::Loader::new(strategies.clone());
            loader.scan(&app);
            let live = app.engine.strategy(&id).is_some();
            let claims = super::loose_claims(typo.as_bytes());
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
            assert!(live, "{name}: {id} held back by another file's bot id; claims {claims:?}");
            assert!(claims.contains(&super::Claim::Id("other-strategy".into())), "{name}: {claims:?}");
            assert!(!claims.contains(&super::Claim::Id(id.clone())), "{name}: {claims:?}");
        }
    }

    /// A typo that breaks the structure before the top-level id (a quote or a brace left open, keys in name order
    /// putting `bots` first): no id at the top level is found, so every id the text holds is claimed, and a stale
    /// copy beside it is still held back.
    #[tokio::test]
    async fn a_typo_that_breaks_the_structure_before_the_id_still_holds_the_copy_back() {
        for (name, from, to) in [
            ("open-quote", "\"asset_class\":\"equity\"", "\"asset_class\":\"equity"),
            ("open-brace", "\"fixed_quantity\":\"10\"}", "\"fixed_quantity\":\"10\""),
            ("open-quote-after-bots", "\"duration\":\"day\"", "\"duration\":\"day"),
        ] {
            let (dir, store, app, strategies) = with_strategies(name);
            let (demo, id, paused) = paused_demo();
            let full = paused.to_string();
            assert!(full.find("\"bots\"").unwrap() < full.find("\"id\":\"demo-equities\"").unwrap());
            let typo = full.replacen(from, to, 1);
            assert_ne!(typo, full, "{name}");
            std::fs::write(strategies.join("demo.json"), &typo).unwrap();
            std::fs::write(strategies.join("demo copy.json"), demo.to_string()).unwrap();
            let mut loader = super::Loader::new(strategies.clone());
            loader.scan(&app);
            let live = app.engine.strategy(&id).map(|s| s.status.as_str().to_owned());
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
            assert!(live.is_none(), "{name}: the stale copy loaded {live:?} beside the file with a typo");
        }
    }

    /// A file edited to define another strategy id, its bots delivered to a broker: the new id loads and the old one
    /// goes, as with paper bots. Its bots' account was counted as the previous version's, another strategy's, and
    /// the new id was refused for good (the previous one never unloaded, so no retry could pass).
    #[tokio::test]
    async fn a_file_edited_to_another_id_loads_with_bots_at_a_broker() {
        let (dir, store, app, strategies) = with_strategies("id-edit-http");
        let mut original = demo();
        original["token_hash"] = serde_json::json!("f".repeat(64));
        let file: serde_json::Map<String, serde_json::Value> = original["bots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let id = b["id"].as_str().unwrap().to_owned();
                let entry = serde_json::json!({ "delivery": "http", "base_url": "https://broker.example/v2",
                                                "headers": { "X-Key": { "value": format!("k-{id}") } } });
                (id, entry)
            })
            .collect();
        let bots = crate::bots::Bots::from_json(serde_json::Value::Object(file).to_string().as_bytes(), &dir).unwrap();
        let app = app.with_bots(bots);
        std::fs::write(strategies.join("demo.json"), original.to_string()).unwrap();
        let mut loader = super::Loader::new(strategies.clone());
        loader.gone_after = std::time::Duration::ZERO;
        assert_eq!(loader.scan(&app), 1);
        assert_eq!(owner(&app, &"f".repeat(64)).as_deref(), Some("demo-equities"));
        let mut edited = original.clone();
        edited["id"] = serde_json::json!("demo-equities-2026");
        edited["token_hash"] = serde_json::json!("e".repeat(64));
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(strategies.join("demo.json"), edited.to_string()).unwrap();
        assert_eq!(loader.scan(&app), 1);
        let (new, old) = (owner(&app, &"e".repeat(64)), owner(&app, &"f".repeat(64)));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!((new.as_deref(), old.as_deref()), (Some("demo-equities-2026"), None));
    }
}
