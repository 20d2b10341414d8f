//! The C ABI: a thin skin over [`Engine`], [`validate`] and [`parse`].
//!
//! Every exported function returns a [`swh_result`], writes its outputs through
//! out-parameters (only on success), takes buffers as pointer plus length, and never
//! unwinds: each body runs inside `ffi_boundary!`, which turns a panic into
//! [`swh_result::SWH_PANIC`]. Handles are checked against a registry of live handles
//! before every use, so a freed, foreign or wrong-type pointer gives
//! [`swh_result::SWH_INVALID_HANDLE`] instead of a read of freed memory. The registry
//! is sharded by address (no process-wide lock on the hot path) and stores addresses
//! disguised, so a leak checker reports a handle the host never freed as lost.
//!
//! The header `include/strategy_webhook.h` is generated from this file by cbindgen;
//! the doc comments here are the header's comments.
#![allow(non_camel_case_types)]

use crate::alert::parse;
use crate::engine::{validate, Engine, EngineError};
use crate::outcome::Outcome;
use crate::strategy::{Strategy, TokenHash};
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::ffi::c_char;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, RwLock};

/// The version of this C ABI. It changes whenever a host compiled against an older
/// header could misbehave with this library: a function removed or changed in its
/// arguments or meaning, a status code renumbered, a limit lowered. Additions that old
/// hosts never see leave it alone. A host checks at start-up that
/// `swh_abi_version()` equals the `SWH_ABI_VERSION` it was compiled with.
pub const SWH_ABI_VERSION: u32 = 1;

/// The largest request body, in bytes, that a delivery reads (256 KiB); a longer body
/// is answered 413 without being parsed. A host may refuse longer bodies before
/// reading them in full.
pub const SWH_MAX_BODY: usize = 262144;

/// The most option legs one order may have: an alert with more is answered 422
/// (`too_many_legs`), a strategy snapshot with more is `SWH_INVALID_SNAPSHOT`.
pub const SWH_MAX_LEGS: usize = 4;

// The header's limits are literals (cbindgen copies them as written); these keep them
// equal to the limits the library enforces.
const _: () = assert!(SWH_MAX_BODY == crate::engine::MAX_BODY);
const _: () = assert!(SWH_MAX_LEGS == crate::alert::MAX_LEGS);

/// Status code returned by every function of this library.
///
/// `SWH_OK` (0) is success: the function's out-parameters were written. Any other
/// value is a failure: no out-parameter was written, and `swh_last_error_message`
/// gives a readable sentence about it on the same thread.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum swh_result {
    /// Success; the out-parameters were written.
    SWH_OK = 0,
    /// A handle or out-parameter pointer that must not be NULL was NULL.
    SWH_NULL_ARGUMENT = 1,
    /// An argument is unusable as given: a buffer pointer is NULL while its length is
    /// not 0, or a length exceeds PTRDIFF_MAX.
    SWH_INVALID_ARGUMENT = 2,
    /// A text argument (content type, strategy id) is not valid UTF-8.
    SWH_INVALID_UTF8 = 3,
    /// The handle is not a live handle of the expected type: it was freed already, was
    /// never returned by this library, or is a handle of another type. Detection is
    /// best-effort (see "Handles" at the top of this header).
    SWH_INVALID_HANDLE = 4,
    /// The strategy snapshot is not valid JSON or fails validation; the message names
    /// the field.
    SWH_INVALID_SNAPSHOT = 5,
    /// Another strategy already answers on this token.
    SWH_TOKEN_IN_USE = 6,
    /// No strategy has this id.
    SWH_UNKNOWN_STRATEGY = 7,
    /// The token is not 64 lowercase hexadecimal characters.
    SWH_INVALID_TOKEN = 8,
    /// The library panicked (a bug); the panic was caught at the boundary. The handles
    /// passed in are still valid and must still be freed.
    SWH_PANIC = 9,
}

/// An engine: strategies by token and the dedup and rate windows that outlive one
/// delivery.
///
/// Created by `swh_engine_new`, owned by the caller, released with `swh_engine_free`.
/// Thread-safe: one engine may be used from several threads at once, including
/// deliveries to the same strategy (two identical deliveries racing each other trade
/// exactly once).
pub struct swh_engine {
    engine: Engine,
}

/// The result of one delivery, dry run or validation: HTTP status, exact response
/// body and the full Outcome JSON.
///
/// Created by `swh_engine_deliver`, `swh_engine_deliver_into`, `swh_engine_deliver_settled`,
/// `swh_engine_dry_run` or `swh_validate`, owned by the caller, released with
/// `swh_outcome_free`. The buffers its accessors return are borrowed from it and stay
/// valid until it is freed or refilled by `swh_engine_deliver_into`. Its accessors may be
/// called from several threads at once; freeing or refilling it must not race with any
/// other use.
pub struct swh_outcome {
    /// The Outcome, its `response` followed by a NUL byte (not part of the answer).
    outcome: Outcome,
    /// The Outcome JSON followed by a NUL byte, made on first request.
    json: OnceLock<String>,
}

/// The result of `swh_parse`: the canonical alert(s) of a body, or the reason it is
/// not an alert.
///
/// Created by `swh_parse`, owned by the caller, released with `swh_parsed_free`. The
/// buffers its accessors return are borrowed from it and stay valid until it is freed.
pub struct swh_parsed {
    ok: bool,
    /// JSON array of canonical alerts followed by a NUL byte (`[]` on failure).
    alerts_json: String,
    /// The reason followed by a NUL byte (empty on success).
    reason: String,
}

// ---------------------------------------------------------------------------------
// Failures, the last error, and the two boundary macros.

/// A failed call: its code and the sentence `swh_last_error_message` gives.
struct Failure {
    code: swh_result,
    message: String,
}

impl Failure {
    fn new(code: swh_result, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        let code = match e {
            EngineError::Snapshot(_) => swh_result::SWH_INVALID_SNAPSHOT,
            EngineError::TokenInUse(_) => swh_result::SWH_TOKEN_IN_USE,
            EngineError::UnknownStrategy(_) => swh_result::SWH_UNKNOWN_STRATEGY,
        };
        Failure::new(code, e.to_string())
    }
}

thread_local! {
    /// The last failure's message on this thread, NUL-terminated; empty when none.
    static LAST_ERROR: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Whether `LAST_ERROR` may hold a message. Every call clears the message, and most
    /// calls succeed after a success: this flag, a plain value with no destructor to
    /// register, lets them skip `LAST_ERROR`'s guarded access and its borrow check.
    static HAS_ERROR: Cell<bool> = const { Cell::new(false) };
}

fn clear_last_error() {
    if HAS_ERROR.with(Cell::get) {
        // Replace rather than clear, so a thread holds no allocation after a success.
        let _ = LAST_ERROR.try_with(|e| drop(e.replace(Vec::new())));
        HAS_ERROR.with(|h| h.set(false));
    }
}

fn set_last_error(message: &str) {
    let mut bytes: Vec<u8> = message.bytes().map(|b| if b == 0 { b'?' } else { b }).collect();
    bytes.push(0);
    HAS_ERROR.with(|h| h.set(true));
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = bytes);
}

/// Turns the body's result (or its panic) into a status code, recording the message.
fn finish(result: std::thread::Result<Result<(), Failure>>) -> swh_result {
    match result {
        Ok(Ok(())) => swh_result::SWH_OK,
        Ok(Err(failure)) => {
            set_last_error(&failure.message);
            failure.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".to_string());
            set_last_error(&format!("internal error: the library panicked ({what}); please report it"));
            swh_result::SWH_PANIC
        }
    }
}

/// Runs a function body that returns `Result<(), Failure>` so that nothing unwinds
/// into C: clears the thread's last error, catches any panic as `SWH_PANIC`, and maps
/// a `Failure` to its code and message. Every exported function's body is wrapped in
/// it.
macro_rules! ffi_boundary {
    ($($body:tt)*) => {
        finish(catch_unwind(AssertUnwindSafe(|| -> Result<(), Failure> {
            clear_last_error();
            $($body)*
        })))
    };
}

/// Returns `SWH_NULL_ARGUMENT` from the enclosing body for the first of the named
/// pointers that is NULL.
macro_rules! check_null {
    ($($ptr:ident),+ $(,)?) => {
        $(
            if $ptr.is_null() {
                return Err(Failure::new(
                    swh_result::SWH_NULL_ARGUMENT,
                    concat!("`", stringify!($ptr), "` is NULL"),
                ));
            }
        )+
    };
}

// ---------------------------------------------------------------------------------
// Buffers in and out.

/// The bytes at `ptr..ptr+len`. NULL with length 0 is the empty buffer.
///
/// # Safety
/// When `ptr` is not NULL it must point to `len` readable bytes that outlive `'a`.
unsafe fn bytes<'a>(ptr: *const u8, len: usize, name: &str) -> Result<&'a [u8], Failure> {
    if ptr.is_null() {
        if len == 0 {
            return Ok(&[]);
        }
        return Err(Failure::new(
            swh_result::SWH_INVALID_ARGUMENT,
            format!("`{name}` is NULL but `{name}_len` is {len}; pass a buffer or length 0"),
        ));
    }
    if len > isize::MAX as usize {
        return Err(Failure::new(swh_result::SWH_INVALID_ARGUMENT, format!("`{name}_len` ({len}) is too large")));
    }
    // SAFETY: not NULL, the length fits an allocation, and the caller promises `len`
    // readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Text at `ptr..ptr+len`, checked to be UTF-8.
///
/// # Safety
/// As for [`bytes`].
unsafe fn text<'a>(ptr: *const c_char, len: usize, name: &str) -> Result<&'a str, Failure> {
    // SAFETY: forwarded to the caller.
    let b = unsafe { bytes(ptr.cast(), len, name)? };
    if b.is_ascii() {
        // SAFETY: ASCII is UTF-8. The check is inlined and word-wide, where `from_utf8` is
        // a call: content types and ids are short ASCII on every delivery.
        return Ok(unsafe { std::str::from_utf8_unchecked(b) });
    }
    std::str::from_utf8(b)
        .map_err(|_| Failure::new(swh_result::SWH_INVALID_UTF8, format!("`{name}` is not valid UTF-8")))
}

/// The content type: NULL or length 0 means none.
///
/// # Safety
/// As for [`bytes`].
unsafe fn content_type<'a>(ptr: *const c_char, len: usize) -> Result<Option<&'a str>, Failure> {
    if len == 0 {
        return Ok(None);
    }
    // SAFETY: forwarded to the caller.
    unsafe { text(ptr, len, "content_type") }.map(Some)
}

/// Writes a borrowed NUL-terminated string through two out-parameters.
///
/// # Safety
/// Both pointers must be valid for writes (checked non-NULL by the caller).
unsafe fn write_str(s: &str, out_ptr: *mut *const c_char, out_len: *mut usize) {
    // Every stored string ends with the NUL that is not part of its length.
    let len = s.len().saturating_sub(1);
    // SAFETY: the caller checked both for NULL and promises they are writable.
    unsafe {
        out_ptr.write(s.as_ptr().cast());
        out_len.write(len);
    }
}

fn with_nul(mut s: String) -> String {
    s.push('\0');
    s
}

// ---------------------------------------------------------------------------------
// The handle registry.
//
// Every call validates its handle before touching it, so the registry sits on the hot
// path and takes no process-wide lock. It is split into shards chosen by address.
// A shard keeps its first entries in a few atomic slots (one cache line): checking a
// handle reads them without locking, and creating or freeing one is a single
// compare-and-swap. Entries beyond the slots go to a map behind the shard's own lock,
// which lookups skip while it is empty and which is released once empty again, so a
// host that freed everything holds no registry memory.
//
// Outcome and parse-result accessors run without any lock: the header makes a free
// that races with another use of the same handle the host's bug. Engine calls are the
// exception, since an engine may be freed while other threads use it: each call holds
// its shard's `engines` lock shared for its whole duration, and `swh_engine_free`
// takes it exclusively before unregistering, so the engine is dropped only after the
// calls inside it have returned. Lock order: `engines`, then `more`, never the reverse.
//
// The registry never holds a handle's address as such, only the address mixed with
// `DISGUISE` (and tagged with the handle's type). A leak checker such as valgrind,
// which looks for pointers into a block, finds none from the registry, so a handle the
// host forgot to free is reported as "definitely lost", as an unfreed malloc() would be.

/// Which type a live handle has; the value tags its registry entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
enum Kind {
    Engine = 1,
    Outcome = 2,
    Parsed = 3,
}

trait Handle: Sized {
    const KIND: Kind;
    const NAME: &'static str;
}

impl Handle for swh_engine {
    const KIND: Kind = Kind::Engine;
    const NAME: &'static str = "swh_engine";
}

impl Handle for swh_outcome {
    const KIND: Kind = Kind::Outcome;
    const NAME: &'static str = "swh_outcome";
}

impl Handle for swh_parsed {
    const KIND: Kind = Kind::Parsed;
    const NAME: &'static str = "swh_parsed";
}

// The type tag lives in the two low bits of an entry, which a handle's (aligned)
// address leaves zero.
const _: () = assert!(
    std::mem::align_of::<swh_engine>() >= 4
        && std::mem::align_of::<swh_outcome>() >= 4
        && std::mem::align_of::<swh_parsed>() >= 4
);

/// log2 of the number of shards.
const SHARD_BITS: u32 = 6;
/// Entries a shard keeps in its lock-free slots.
const SLOTS: usize = 8;
/// Mixed into every stored address. With the top bit set, an entry is never a
/// user-space address on 64-bit targets, so it cannot keep a block "reachable"; the
/// two low bits are clear for the type tag.
const DISGUISE: usize = 0xA5C3_96E1_5A3C_6918_u64 as usize;

/// One shard, aligned so that its slots fill one cache line of their own.
#[repr(align(64))]
struct Shard {
    /// Entries of live handles; 0 is a free slot.
    slots: [AtomicUsize; SLOTS],
    /// How many entries `more` holds, so that lookups skip its lock while it is empty.
    more_len: AtomicUsize,
    /// Entries that found no free slot.
    more: RwLock<BTreeSet<usize>>,
    /// Held shared by every engine call for its duration, exclusively by an engine's free.
    engines: RwLock<()>,
}

impl Shard {
    const fn new() -> Shard {
        Shard {
            slots: [const { AtomicUsize::new(0) }; SLOTS],
            more_len: AtomicUsize::new(0),
            more: RwLock::new(BTreeSet::new()),
            engines: RwLock::new(()),
        }
    }

    fn contains(&self, entry: usize) -> bool {
        self.slots.iter().any(|s| s.load(Ordering::Acquire) == entry)
            || (self.more_len.load(Ordering::Acquire) != 0
                && self.more.read().unwrap_or_else(|e| e.into_inner()).contains(&entry))
    }

    fn insert(&self, entry: usize) {
        for slot in &self.slots {
            // Load first: a failed compare-and-swap costs as much as a successful one.
            if slot.load(Ordering::Relaxed) == 0
                && slot.compare_exchange(0, entry, Ordering::Release, Ordering::Relaxed).is_ok()
            {
                return;
            }
        }
        let mut more = self.more.write().unwrap_or_else(|e| e.into_inner());
        more.insert(entry);
        self.more_len.store(more.len(), Ordering::Release);
    }

    /// Removes an entry; tells whether it was there (at most one caller wins).
    fn remove(&self, entry: usize) -> bool {
        for slot in &self.slots {
            if slot.load(Ordering::Relaxed) == entry {
                return slot.compare_exchange(entry, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok();
            }
        }
        if self.more_len.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut more = self.more.write().unwrap_or_else(|e| e.into_inner());
        let removed = more.remove(&entry);
        if more.is_empty() {
            // Give the map's memory back, so a host that freed everything holds nothing.
            *more = BTreeSet::new();
        }
        self.more_len.store(more.len(), Ordering::Release);
        removed
    }
}

static SHARDS: [Shard; 1 << SHARD_BITS] = [const { Shard::new() }; 1 << SHARD_BITS];

/// The shard of a handle and its entry there, or `None` for a pointer that cannot be
/// a handle of this type (misaligned). Fibonacci hashing spreads neighbouring
/// allocations over all shards.
fn entry_of<T: Handle>(ptr: *const T) -> Option<(&'static Shard, usize)> {
    if !ptr.is_aligned() {
        return None;
    }
    let addr = ptr as usize;
    let shard = ((addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARD_BITS)) as usize;
    Some((&SHARDS[shard], (addr ^ DISGUISE) | T::KIND as usize))
}

fn invalid<T: Handle>() -> Failure {
    Failure::new(
        swh_result::SWH_INVALID_HANDLE,
        format!("not a live {}: it was freed already, or is not a {} returned by this library", T::NAME, T::NAME),
    )
}

/// Registers a boxed value as a live handle. Taking the box (rather than the value)
/// spares a copy of a large value on the way to the heap.
fn register<T: Handle>(value: Box<T>) -> *mut T {
    let ptr = Box::into_raw(value);
    if let Some((shard, entry)) = entry_of(ptr) {
        shard.insert(entry);
    }
    ptr
}

/// Runs `f` on a live outcome or parse result. Not for engines: see [`with_engine`].
fn with_handle<T: Handle, R>(ptr: *const T, f: impl FnOnce(&T) -> R) -> Result<R, Failure> {
    debug_assert!(T::KIND != Kind::Engine);
    match entry_of(ptr) {
        // SAFETY: the address is registered with this type, so it came from
        // `Box::into_raw` in `register::<T>` and has not been released; the header
        // forbids freeing it while this call runs.
        Some((shard, entry)) if shard.contains(entry) => Ok(f(unsafe { &*ptr })),
        _ => Err(invalid::<T>()),
    }
}

/// Runs `f` on a live outcome, mutably. The header makes any other use of the outcome
/// while this call runs the host's bug, as it does a free.
fn with_outcome_mut<R>(ptr: *mut swh_outcome, f: impl FnOnce(&mut swh_outcome) -> R) -> Result<R, Failure> {
    match entry_of(ptr) {
        // SAFETY: the address is registered as an outcome, so it came from `Box::into_raw`
        // in `register::<swh_outcome>` and has not been released; the header forbids any
        // other use of it while this call runs.
        Some((shard, entry)) if shard.contains(entry) => Ok(f(unsafe { &mut *ptr })),
        _ => Err(invalid::<swh_outcome>()),
    }
}

/// Runs `f` on the engine of a live handle, keeping the handle from being freed until
/// `f` returns. `f` must not free an engine.
fn with_engine<R>(ptr: *const swh_engine, f: impl FnOnce(&Engine) -> R) -> Result<R, Failure> {
    let (shard, entry) = entry_of(ptr).ok_or_else(invalid::<swh_engine>)?;
    let _calls = shard.engines.read().unwrap_or_else(|e| e.into_inner());
    if !shard.contains(entry) {
        return Err(invalid::<swh_engine>());
    }
    // SAFETY: registered as an engine, so it came from `register::<swh_engine>`; the
    // shared `engines` lock keeps `release` from dropping it until `f` returns.
    Ok(f(unsafe { &(*ptr).engine }))
}

/// Unregisters a live handle and drops it. NULL does nothing.
fn release<T: Handle>(ptr: *mut T) -> Result<(), Failure> {
    if ptr.is_null() {
        return Ok(());
    }
    let (shard, entry) = entry_of(ptr).ok_or_else(invalid::<T>)?;
    // An engine waits for the calls running inside it.
    let calls = (T::KIND == Kind::Engine).then(|| shard.engines.write().unwrap_or_else(|e| e.into_inner()));
    if !shard.remove(entry) {
        return Err(invalid::<T>());
    }
    drop(calls);
    // SAFETY: it was registered with this type (so it came from `register::<T>`), and
    // exactly one caller unregistered it, above, so no other call can reach it again.
    drop(unsafe { Box::from_raw(ptr) });
    Ok(())
}

/// A new outcome handle holding what `make` returns. The handle's memory is taken first
/// and the Outcome moved into it once (built on the stack, it was copied through three
/// slots on the way to a box).
fn outcome_handle(make: impl FnOnce() -> Outcome) -> *mut swh_outcome {
    let mut slot: Box<MaybeUninit<swh_outcome>> = Box::new(MaybeUninit::uninit());
    let o = slot.write(swh_outcome { outcome: make(), json: OnceLock::new() });
    terminate(&mut o.outcome);
    // SAFETY: written just above; `MaybeUninit<T>` has `T`'s layout.
    register(unsafe { Box::from_raw(Box::into_raw(slot).cast::<swh_outcome>()) })
}

/// A delivery into a live handle, in place of what it held (its JSON, if made, goes too).
/// Should the library panic on the way, the handle is left answering 500 rather than
/// half-written, and the panic goes on to the boundary (`SWH_PANIC`).
fn deliver_into(e: &Engine, o: &mut swh_outcome, token: &[u8], body: &[u8], ct: Option<&str>, now_ms: i64) {
    o.json = OnceLock::new();
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| e.deliver_into(&mut o.outcome, token, body, ct, now_ms))) {
        o.outcome = Outcome::failed(
            crate::outcome::ErrorKind::OrderFailed,
            "internal error: the library panicked during this delivery".into(),
        );
        terminate(&mut o.outcome);
        std::panic::resume_unwind(panic);
    }
    terminate(&mut o.outcome);
}

/// Puts a NUL after an outcome's response. The fixed answers are kept with a NUL after
/// them, and the core leaves a spare byte in any other answer's capacity: either way the
/// NUL costs no allocation.
fn terminate(outcome: &mut Outcome) {
    match outcome.fixed_response_with_nul() {
        Some(with_nul) => outcome.response = Cow::Borrowed(with_nul),
        None => outcome.response.to_mut().push('\0'),
    }
}

/// The Outcome JSON of a handle, whose response ends with a NUL.
fn outcome_json(o: &swh_outcome) -> String {
    let mut full = o.outcome.clone();
    full.response = match full.response {
        Cow::Borrowed(r) => Cow::Borrowed(r.strip_suffix('\0').unwrap_or(r)),
        Cow::Owned(mut r) => {
            r.pop();
            Cow::Owned(r)
        }
    };
    with_nul(full.to_json())
}

// ---------------------------------------------------------------------------------
// Library.

/// The library version (for example `"0.1.0"`).
///
/// On success writes to `*out_version` a pointer to static, NUL-terminated text
/// (owned by the library, never freed) and to `*out_len` its length without the NUL.
///
/// Returns `SWH_OK`, or `SWH_NULL_ARGUMENT` when an out-parameter is NULL.
///
/// # Safety
/// `out_version` and `out_len` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_version(out_version: *mut *const c_char, out_len: *mut usize) -> swh_result {
    ffi_boundary! {
        check_null!(out_version, out_len);
        // SAFETY: checked non-NULL; the caller promises they are writable.
        unsafe { write_str(concat!(env!("CARGO_PKG_VERSION"), "\0"), out_version, out_len) };
        Ok(())
    }
}

/// A readable sentence about the last failed call on the calling thread.
///
/// Every other function of this library clears the message when called and sets it
/// when it fails, so the message describes the most recent call on this thread; it is
/// empty (length 0) when that call succeeded.
///
/// On success writes to `*out_message` a pointer to NUL-terminated UTF-8 text owned by
/// the library, valid until the next call of any other `swh_` function on this thread
/// (copy it to keep it), and to `*out_len` its length without the NUL.
///
/// Returns `SWH_OK`, or `SWH_NULL_ARGUMENT` when an out-parameter is NULL (the message,
/// and a pointer to it written by an earlier call, are left as they were).
///
/// # Safety
/// `out_message` and `out_len` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_last_error_message(out_message: *mut *const c_char, out_len: *mut usize) -> swh_result {
    // Not `ffi_boundary!`: reading the message must not clear it. Nor may a NULL argument
    // replace it: that would free the text an earlier call handed out, which the host may
    // still be reading.
    if out_message.is_null() || out_len.is_null() {
        return swh_result::SWH_NULL_ARGUMENT;
    }
    finish(catch_unwind(AssertUnwindSafe(|| -> Result<(), Failure> {
        let (ptr, len) = LAST_ERROR
            .try_with(|e| {
                let e = e.borrow();
                if e.is_empty() {
                    (c"".as_ptr(), 0)
                } else {
                    (e.as_ptr().cast::<c_char>(), e.len() - 1)
                }
            })
            .unwrap_or((c"".as_ptr(), 0));
        // SAFETY: checked non-NULL; the caller promises they are writable.
        unsafe {
            out_message.write(ptr);
            out_len.write(len);
        }
        Ok(())
    })))
}

/// The version of this C ABI: `SWH_ABI_VERSION` of the header the library was built
/// with.
///
/// Compare it with `SWH_ABI_VERSION` at start-up: when they differ, the library was
/// built for another header and no other function may be relied upon. The one
/// function that returns a value rather than an `swh_result`: it cannot fail, and it
/// leaves the last error message as it is.
#[no_mangle]
pub extern "C" fn swh_abi_version() -> u32 {
    SWH_ABI_VERSION
}

// ---------------------------------------------------------------------------------
// Engine.

/// Creates an empty engine with the spec's limits (60 alerts a minute per webhook,
/// 300 s dedup window).
///
/// On success writes the new engine to `*out_engine`; the caller owns it and frees it
/// with `swh_engine_free`.
///
/// Returns `SWH_OK`, or `SWH_NULL_ARGUMENT` when `out_engine` is NULL.
///
/// # Safety
/// `out_engine` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_new(out_engine: *mut *mut swh_engine) -> swh_result {
    ffi_boundary! {
        check_null!(out_engine);
        let engine = register(Box::new(swh_engine { engine: Engine::new() }));
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { out_engine.write(engine) };
        Ok(())
    }
}

/// Frees an engine and every strategy and window in it. NULL does nothing.
///
/// Calls already running on other threads finish safely; calls made afterwards with
/// this pointer return `SWH_INVALID_HANDLE` (best-effort, see "Handles").
///
/// Returns `SWH_OK` (also for NULL), or `SWH_INVALID_HANDLE` when `engine` is not a
/// live engine (for example a second free); nothing is freed then.
///
/// # Safety
/// `engine` must be NULL or a pointer returned by `swh_engine_new`.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_free(engine: *mut swh_engine) -> swh_result {
    ffi_boundary! { release(engine) }
}

/// Adds a strategy from its JSON snapshot, or replaces the one with the same id
/// (keeping its dedup and rate state; a new token on a known id is a rotation).
///
/// `snapshot` is `snapshot_len` bytes of JSON, borrowed for the call only.
///
/// Returns `SWH_OK`; `SWH_INVALID_SNAPSHOT` when the JSON is malformed or fails
/// validation; `SWH_TOKEN_IN_USE` when another strategy has its token;
/// `SWH_NULL_ARGUMENT`, `SWH_INVALID_ARGUMENT` or `SWH_INVALID_HANDLE` for bad
/// arguments. The engine is unchanged on failure.
///
/// # Safety
/// `engine` must be NULL or a pointer returned by `swh_engine_new`; `snapshot` must
/// be NULL or point to `snapshot_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_upsert(
    engine: *const swh_engine,
    snapshot: *const u8,
    snapshot_len: usize,
) -> swh_result {
    ffi_boundary! {
        check_null!(engine);
        // SAFETY: the caller promises `snapshot_len` readable bytes.
        let snapshot = unsafe { bytes(snapshot, snapshot_len, "snapshot")? };
        with_engine(engine, |e| e.upsert_json(snapshot))??;
        Ok(())
    }
}

/// Removes a strategy and its dedup and rate state.
///
/// `strategy_id` is `strategy_id_len` bytes of UTF-8 (no NUL needed), borrowed for the
/// call only.
///
/// Returns `SWH_OK`; `SWH_UNKNOWN_STRATEGY` when no strategy has this id;
/// `SWH_INVALID_UTF8` when the id is not UTF-8; `SWH_NULL_ARGUMENT`,
/// `SWH_INVALID_ARGUMENT` or `SWH_INVALID_HANDLE` for bad arguments.
///
/// # Safety
/// `engine` must be NULL or a pointer returned by `swh_engine_new`; `strategy_id`
/// must be NULL or point to `strategy_id_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_remove(
    engine: *const swh_engine,
    strategy_id: *const c_char,
    strategy_id_len: usize,
) -> swh_result {
    ffi_boundary! {
        check_null!(engine);
        // SAFETY: the caller promises `strategy_id_len` readable bytes.
        let id = unsafe { text(strategy_id, strategy_id_len, "strategy_id")? };
        if with_engine(engine, |e| e.remove(id))? {
            Ok(())
        } else {
            Err(EngineError::UnknownStrategy(id.to_string()).into())
        }
    }
}

/// Gives a strategy a new token: the old token answers 404 from now on; the strategy
/// keeps its dedup and rate state.
///
/// `strategy_id` (UTF-8) and `new_token` (64 lowercase hex characters) are borrowed
/// for the call only; neither needs a NUL.
///
/// Returns `SWH_OK`; `SWH_INVALID_TOKEN` when `new_token` is not 64 lowercase hex
/// characters; `SWH_UNKNOWN_STRATEGY` when no strategy has this id;
/// `SWH_TOKEN_IN_USE` when another strategy has this token; `SWH_INVALID_UTF8`,
/// `SWH_NULL_ARGUMENT`, `SWH_INVALID_ARGUMENT` or `SWH_INVALID_HANDLE` for bad
/// arguments.
///
/// # Safety
/// `engine` must be NULL or a pointer returned by `swh_engine_new`; each buffer must
/// be NULL or point to its length in readable bytes.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_rotate(
    engine: *const swh_engine,
    strategy_id: *const c_char,
    strategy_id_len: usize,
    new_token: *const u8,
    new_token_len: usize,
) -> swh_result {
    ffi_boundary! {
        check_null!(engine);
        // SAFETY: the caller promises readable buffers of these lengths.
        let id = unsafe { text(strategy_id, strategy_id_len, "strategy_id")? };
        // SAFETY: as above.
        let token = unsafe { bytes(new_token, new_token_len, "new_token")? };
        let token = TokenHash::parse(token).ok_or_else(|| {
            Failure::new(swh_result::SWH_INVALID_TOKEN, "the new token must be 64 lowercase hexadecimal characters")
        })?;
        with_engine(engine, |e| e.rotate(id, token))??;
        Ok(())
    }
}

/// Shared body of `swh_engine_deliver`, `swh_engine_dry_run` and `swh_engine_deliver_settled`: reads the
/// token, body and content type, then has `decide` answer them on the engine.
///
/// # Safety
/// As for `swh_engine_deliver`.
#[allow(clippy::too_many_arguments)]
unsafe fn handle(
    engine: *const swh_engine,
    token: *const u8,
    token_len: usize,
    body: *const u8,
    body_len: usize,
    content_type_ptr: *const c_char,
    content_type_len: usize,
    out_outcome: *mut *mut swh_outcome,
    decide: impl FnOnce(&Engine, &[u8], &[u8], Option<&str>) -> Outcome,
) -> Result<(), Failure> {
    check_null!(engine, out_outcome);
    // SAFETY: the caller promises readable buffers of these lengths.
    let (token, body, ct) = unsafe {
        (
            bytes(token, token_len, "token")?,
            bytes(body, body_len, "body")?,
            content_type(content_type_ptr, content_type_len)?,
        )
    };
    let handle = with_engine(engine, |e| outcome_handle(|| decide(e, token, body, ct)))?;
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { out_outcome.write(handle) };
    Ok(())
}

/// Handles one POST to `/webhooks/{token}`: the whole order of checks, recording the
/// delivery in the engine's dedup and rate windows.
///
/// - `token`, `token_len`: the token from the URL path. A malformed or unknown token
///   is not an error of this call: the outcome answers 400 or 404.
/// - `body`, `body_len`: the raw request body.
/// - `content_type`, `content_type_len`: the `Content-Type` header value; NULL or
///   length 0 means none.
/// - `now_ms`: the current time in Unix milliseconds.
///
/// All buffers are borrowed for the call only; none needs a NUL. On success writes a
/// new outcome to `*out_outcome`; the caller owns it and frees it with
/// `swh_outcome_free`. Every HTTP answer (including 4xx and 5xx) is a success of this
/// call: read it with `swh_outcome_http_status` and `swh_outcome_response`.
///
/// Returns `SWH_OK`; `SWH_NULL_ARGUMENT` when `engine` or `out_outcome` is NULL;
/// `SWH_INVALID_ARGUMENT` when a buffer is NULL with a length other than 0;
/// `SWH_INVALID_UTF8` when the content type is not UTF-8; `SWH_INVALID_HANDLE` when
/// `engine` is not a live engine.
///
/// # Safety
/// `engine` must be NULL or a pointer returned by `swh_engine_new`; each buffer must
/// be NULL or point to its length in readable bytes; `out_outcome` must be NULL or
/// valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_deliver(
    engine: *const swh_engine,
    token: *const u8,
    token_len: usize,
    body: *const u8,
    body_len: usize,
    content_type: *const c_char,
    content_type_len: usize,
    now_ms: i64,
    out_outcome: *mut *mut swh_outcome,
) -> swh_result {
    ffi_boundary! {
        // SAFETY: forwarded to the caller.
        unsafe {
            handle(engine, token, token_len, body, body_len, content_type, content_type_len, out_outcome, |e, t, b, ct| {
                e.deliver(t, b, ct, now_ms)
            })
        }
    }
}

/// `swh_engine_deliver` into an outcome the caller keeps, for a host that handles one
/// delivery after another: reusing one outcome spares each delivery the allocation and
/// registration of a new handle.
///
/// - `*inout_outcome` NULL: a new outcome is written there, as by `swh_engine_deliver`.
/// - `*inout_outcome` a live outcome (from any function of this library): its contents
///   are replaced by this delivery's, and the pointer is left as it was. The text its
///   accessors returned before (response, Outcome JSON) is released: copy what must
///   outlive the next delivery. Nothing else may use that outcome during this call.
/// - The other arguments and their checks as for `swh_engine_deliver`.
///
/// The caller owns the outcome and frees it with `swh_outcome_free` once done. On a
/// failure nothing is delivered (the checks come first) and `*inout_outcome` is left as
/// it was: an outcome passed in keeps its earlier contents and must still be freed.
/// The one exception is `SWH_PANIC` with a live outcome passed in: the delivery may
/// have gone part of the way (its rate count and dedup claim may be recorded), and that
/// outcome now answers 500, so a host that sends its answer makes the sender retry
/// (with NULL passed in, nothing is written, as for `swh_engine_deliver`).
///
/// Returns as `swh_engine_deliver`; `SWH_NULL_ARGUMENT` when `engine` or `inout_outcome`
/// is NULL; `SWH_INVALID_HANDLE` when `*inout_outcome` is neither NULL nor a live outcome.
///
/// # Safety
/// As for `swh_engine_deliver`; `inout_outcome` must be NULL or valid for reads and
/// writes, and `*inout_outcome` NULL or a pointer returned by this library.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_deliver_into(
    engine: *const swh_engine,
    token: *const u8,
    token_len: usize,
    body: *const u8,
    body_len: usize,
    content_type: *const c_char,
    content_type_len: usize,
    now_ms: i64,
    inout_outcome: *mut *mut swh_outcome,
) -> swh_result {
    ffi_boundary! {
        check_null!(engine, inout_outcome);
        // SAFETY: checked non-NULL; the caller promises it is readable.
        let current = unsafe { inout_outcome.read() };
        if current.is_null() {
            // SAFETY: forwarded to the caller.
            return unsafe {
                handle(engine, token, token_len, body, body_len, content_type, content_type_len, inout_outcome, |e, t, b, ct| {
                    e.deliver(t, b, ct, now_ms)
                })
            };
        }
        // SAFETY: the caller promises readable buffers of these lengths.
        let (token, body, ct) = unsafe {
            (bytes(token, token_len, "token")?, bytes(body, body_len, "body")?, self::content_type(content_type, content_type_len)?)
        };
        // The outcome is checked before the delivery, so a bad handle records nothing.
        with_outcome_mut(current, |o| with_engine(engine, |e| deliver_into(e, o, token, body, ct, now_ms)))?
    }
}

/// The same checks as `swh_engine_deliver` against the engine's current state,
/// recording nothing (the product's "validate a sample message").
///
/// Arguments, ownership and status codes as for `swh_engine_deliver`.
///
/// # Safety
/// As for `swh_engine_deliver`.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_dry_run(
    engine: *const swh_engine,
    token: *const u8,
    token_len: usize,
    body: *const u8,
    body_len: usize,
    content_type: *const c_char,
    content_type_len: usize,
    now_ms: i64,
    out_outcome: *mut *mut swh_outcome,
) -> swh_result {
    ffi_boundary! {
        // SAFETY: forwarded to the caller.
        unsafe {
            handle(engine, token, token_len, body, body_len, content_type, content_type_len, out_outcome, |e, t, b, ct| {
                e.dry_run(t, b, ct, now_ms)
            })
        }
    }
}

/// What a host's own store says of a delivery's dedup key, for
/// `swh_engine_deliver_settled`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum swh_claim {
    /// A new key (or one whose window has passed), now claimed by the host.
    SWH_CLAIM_FRESH = 0,
    /// Seen within the window; not the first duplicate of the window (no log row).
    SWH_CLAIM_DUPLICATE = 1,
    /// Seen within the window, and the first duplicate of the window (logged once).
    SWH_CLAIM_DUPLICATE_FIRST = 2,
}

/// The dedup key of a body: when the sender gave a `message_id`, SHA-256 of the bytes
/// `strategy-webhook message_id` and a NUL followed by the id (so that an id never
/// collides with a body's hash), else SHA-256 of the raw body (as `swh_engine_deliver`
/// computes it). A host that keeps the dedup window in its own database claims this key
/// before `swh_engine_deliver_settled`; it takes the key from here or from an Outcome's
/// `dedup_key`, never works it out itself.
///
/// `body` and `content_type` (NULL or length 0 for none) are borrowed for the call
/// only; `out_key` must point to 32 writable bytes.
///
/// Returns `SWH_OK`; `SWH_NULL_ARGUMENT` when `out_key` is NULL;
/// `SWH_INVALID_ARGUMENT` when a buffer is NULL with a length other than 0;
/// `SWH_INVALID_UTF8` when the content type is not UTF-8.
///
/// # Safety
/// `body` must point to `body_len` readable bytes (or be NULL with length 0), the
/// same for `content_type`, and `out_key` to 32 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn swh_dedup_key(
    body: *const u8,
    body_len: usize,
    content_type: *const c_char,
    content_type_len: usize,
    out_key: *mut u8,
) -> swh_result {
    ffi_boundary! {
        check_null!(out_key);
        // SAFETY: the caller promises readable buffers of these lengths.
        let (body, ct) = unsafe { (bytes(body, body_len, "body")?, self::content_type(content_type, content_type_len)?) };
        let key = crate::engine::dedup_key(body, &crate::alert::parse(body, ct));
        // SAFETY: checked non-NULL; the caller promises 32 writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(key.as_ptr(), out_key, key.len()) };
        Ok(())
    }
}

/// Gives back a delivery's dedup key (the 32 bytes `swh_dedup_key` gives for its body): the host could not make
/// a processed outcome durable (its store failed, its queue was down) and answers the sender with an error, so
/// the sender's retry must trade once rather than be answered `duplicate` for the rest of the window. An error
/// answer from the engine itself needs no call: its key was never kept.
///
/// `strategy_id` is `strategy_id_len` bytes of UTF-8 (no NUL needed) and `dedup_key` 32 bytes, both borrowed
/// for the call only. Giving back a key the strategy does not hold does nothing.
///
/// Returns `SWH_OK`; `SWH_UNKNOWN_STRATEGY` when no strategy has this id; `SWH_INVALID_UTF8` when the id is
/// not UTF-8; `SWH_NULL_ARGUMENT`, `SWH_INVALID_ARGUMENT` or `SWH_INVALID_HANDLE` for bad arguments.
///
/// # Safety
/// `engine` must be NULL or a pointer returned by `swh_engine_new`; `strategy_id` must be NULL or point to
/// `strategy_id_len` readable bytes, and `dedup_key` NULL or point to 32 readable bytes.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_release(
    engine: *const swh_engine,
    strategy_id: *const c_char,
    strategy_id_len: usize,
    dedup_key: *const u8,
) -> swh_result {
    ffi_boundary! {
        check_null!(engine);
        check_null!(dedup_key);
        // SAFETY: the caller promises `strategy_id_len` readable bytes.
        let id = unsafe { text(strategy_id, strategy_id_len, "strategy_id")? };
        // SAFETY: checked non-NULL; the caller promises 32 readable bytes.
        let key: [u8; 32] = unsafe { std::ptr::read_unaligned(dedup_key.cast::<[u8; 32]>()) };
        with_engine(engine, |e| {
            if e.strategy(id).is_none() {
                return Err(EngineError::UnknownStrategy(id.to_string()));
            }
            crate::state::StateStore::release(e.store(), id, &key);
            Ok(())
        })??;
        Ok(())
    }
}

/// `swh_engine_deliver` with the rate count and the dedup claim answered by the host
/// instead of the engine's own windows: for a host that keeps them in its own database
/// and makes the count and the claim in the same transaction as the orders it stores
/// (several servers sharing one database). The engine's windows are not touched.
///
/// - `within_rate`: whether one more delivery fits the strategy's rate window.
/// - `claim`: what the host's store says of the key from `swh_dedup_key`.
/// - The other arguments, ownership and status codes as for `swh_engine_deliver`.
/// - `*out_counted`: whether the delivery was counted (the host records a rate mark).
/// - `*out_keeps_claim`: whether the host keeps its fresh claim of the key (false when
///   the answer is an error, so that the sender's retry trades once).
///
/// Returns as `swh_engine_deliver`, and `SWH_NULL_ARGUMENT` when `out_counted` or
/// `out_keeps_claim` is NULL, `SWH_INVALID_ARGUMENT` when `claim` is not one of
/// `swh_claim`. On any code but `SWH_OK` the out-parameters are not written: the host
/// answers 500, gives its fresh claim back and records no rate mark, so that the
/// sender's retry trades once (after `SWH_PANIC` above all: nothing was decided).
///
/// # Safety
/// As for `swh_engine_deliver`; `out_counted` and `out_keeps_claim` must be writable.
#[no_mangle]
pub unsafe extern "C" fn swh_engine_deliver_settled(
    engine: *const swh_engine,
    within_rate: bool,
    claim: u32,
    token: *const u8,
    token_len: usize,
    body: *const u8,
    body_len: usize,
    content_type: *const c_char,
    content_type_len: usize,
    now_ms: i64,
    out_outcome: *mut *mut swh_outcome,
    out_counted: *mut bool,
    out_keeps_claim: *mut bool,
) -> swh_result {
    ffi_boundary! {
        check_null!(out_counted, out_keeps_claim);
        let claim = match claim {
            0 => crate::state::Claim::Fresh,
            1 => crate::state::Claim::Duplicate { log: false },
            2 => crate::state::Claim::Duplicate { log: true },
            other => {
                return Err(Failure::new(
                    swh_result::SWH_INVALID_ARGUMENT,
                    format!("`claim` is {other}; it must be SWH_CLAIM_FRESH, SWH_CLAIM_DUPLICATE or SWH_CLAIM_DUPLICATE_FIRST"),
                ))
            }
        };
        let settled = crate::state::Settled::new(within_rate, claim);
        // SAFETY: forwarded to the caller.
        unsafe {
            handle(engine, token, token_len, body, body_len, content_type, content_type_len, out_outcome, |e, t, b, ct| {
                e.deliver_settled(&settled, t, b, ct, now_ms)
            })?;
        }
        // SAFETY: checked non-NULL; the caller promises they are writable.
        unsafe {
            out_counted.write(settled.counted());
            out_keeps_claim.write(settled.keeps_claim());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Validate and parse, without an engine.

/// A dry run of one body against a strategy snapshot, with no engine at all: the
/// checks from the body size on (413, inactive, parse, rules, orders), without token,
/// rate or dedup. Nothing is recorded anywhere.
///
/// `snapshot` (JSON), `body` and `content_type` (NULL or length 0 for none) are
/// borrowed for the call only. On success writes a new outcome to `*out_outcome`; the
/// caller owns it and frees it with `swh_outcome_free`.
///
/// Returns `SWH_OK`; `SWH_INVALID_SNAPSHOT` when the snapshot is malformed or fails
/// validation; `SWH_NULL_ARGUMENT` when `out_outcome` is NULL; `SWH_INVALID_ARGUMENT`
/// when a buffer is NULL with a length other than 0; `SWH_INVALID_UTF8` when the
/// content type is not UTF-8.
///
/// # Safety
/// Each buffer must be NULL or point to its length in readable bytes; `out_outcome`
/// must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_validate(
    snapshot: *const u8,
    snapshot_len: usize,
    body: *const u8,
    body_len: usize,
    content_type: *const c_char,
    content_type_len: usize,
    now_ms: i64,
    out_outcome: *mut *mut swh_outcome,
) -> swh_result {
    ffi_boundary! {
        check_null!(out_outcome);
        // SAFETY: the caller promises readable buffers of these lengths.
        let (snapshot, body, ct) = unsafe {
            (
                bytes(snapshot, snapshot_len, "snapshot")?,
                bytes(body, body_len, "body")?,
                self::content_type(content_type, content_type_len)?,
            )
        };
        let strategy = Strategy::from_json(snapshot).map_err(EngineError::from)?;
        let handle = outcome_handle(|| validate(&strategy, body, ct, now_ms));
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { out_outcome.write(handle) };
        Ok(())
    }
}

/// Parses a body into canonical alerts, with no strategy: the first step of a
/// delivery on its own.
///
/// `body` and `content_type` (NULL or length 0 for none) are borrowed for the call
/// only. A body that is not an alert is not an error of this call: the result says so
/// (`swh_parsed_ok` gives false and `swh_parsed_reason` the reason). On success writes
/// a new result to `*out_parsed`; the caller owns it and frees it with
/// `swh_parsed_free`.
///
/// Returns `SWH_OK`; `SWH_NULL_ARGUMENT` when `out_parsed` is NULL;
/// `SWH_INVALID_ARGUMENT` when a buffer is NULL with a length other than 0;
/// `SWH_INVALID_UTF8` when the content type is not UTF-8.
///
/// # Safety
/// Each buffer must be NULL or point to its length in readable bytes; `out_parsed`
/// must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_parse(
    body: *const u8,
    body_len: usize,
    content_type: *const c_char,
    content_type_len: usize,
    out_parsed: *mut *mut swh_parsed,
) -> swh_result {
    ffi_boundary! {
        check_null!(out_parsed);
        // SAFETY: the caller promises readable buffers of these lengths.
        let (body, ct) = unsafe { (bytes(body, body_len, "body")?, self::content_type(content_type, content_type_len)?) };
        let parsed = match parse(body, ct) {
            Ok(alerts) => swh_parsed {
                ok: true,
                alerts_json: with_nul(serde_json::to_string(&alerts).unwrap_or_else(|_| "[]".into())),
                reason: with_nul(String::new()),
            },
            Err(e) => swh_parsed { ok: false, alerts_json: with_nul("[]".into()), reason: with_nul(e.to_string()) },
        };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { out_parsed.write(register(Box::new(parsed))) };
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Outcome.

/// The HTTP status to answer with (200, 400, 404, 413, 422, 429 or 500).
///
/// Returns `SWH_OK` and writes `*out_status`; `SWH_NULL_ARGUMENT` when an argument is
/// NULL; `SWH_INVALID_HANDLE` when `outcome` is not a live outcome.
///
/// # Safety
/// `outcome` must be NULL or a pointer returned by this library; `out_status` must be
/// NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_outcome_http_status(outcome: *const swh_outcome, out_status: *mut u16) -> swh_result {
    ffi_boundary! {
        check_null!(outcome, out_status);
        let status = with_handle(outcome, |o| o.outcome.http_status)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { out_status.write(status) };
        Ok(())
    }
}

/// The exact HTTP response body (JSON text), byte for byte what the endpoint answers.
///
/// On success writes to `*out_body` a pointer to UTF-8 text and to `*out_len` its
/// length; a NUL byte follows the text (not counted). The text is borrowed from the
/// outcome: valid until `swh_outcome_free(outcome)`, or until the outcome is refilled by
/// `swh_engine_deliver_into`; do not free it.
///
/// Returns `SWH_OK`; `SWH_NULL_ARGUMENT` when an argument is NULL;
/// `SWH_INVALID_HANDLE` when `outcome` is not a live outcome.
///
/// # Safety
/// `outcome` must be NULL or a pointer returned by this library; `out_body` and
/// `out_len` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_outcome_response(
    outcome: *const swh_outcome,
    out_body: *mut *const c_char,
    out_len: *mut usize,
) -> swh_result {
    ffi_boundary! {
        check_null!(outcome, out_body, out_len);
        // SAFETY: checked non-NULL; the caller promises they are writable. The text
        // lives as long as the handle.
        with_handle(outcome, |o| unsafe { write_str(&o.outcome.response, out_body, out_len) })
    }
}

/// The whole Outcome as JSON: `http_status`, `response`, `decision`, `reason`,
/// `alerts`, `orders` and `logs` (the contract in DESIGN.md), with `code`, `strategy` and
/// `dedup_key` where they apply (the README's "The Outcome").
///
/// Each entry of `orders` is one broker request: `bot`, `broker`, `kind` (`place`,
/// `replace` or `cancel`), `client_order_id`, for a replace or a cancel the broker's
/// `order_id`, for a replace `keeps_order_id`, the `request` (method, path, content type,
/// body) and the `order` it was formatted from. An entry with `after` (a client order id)
/// may be sent only once the request it names has succeeded: hold it back when that one
/// failed, was refused, or its outcome is unknown. Among them: a re-size's new order
/// behind the cancel of the old one, a CLOSE behind the cancel of a working exit, the
/// new side of a reversal behind the close of the old; sent anyway, such a request can
/// double a position or open one beside the side that could not be closed.
///
/// On success writes to `*out_json` a pointer to UTF-8 text and to `*out_len` its
/// length; a NUL byte follows the text (not counted). The text is made on the first
/// call and borrowed from the outcome: valid until `swh_outcome_free(outcome)`, or until
/// the outcome is refilled by `swh_engine_deliver_into`; do not free it.
///
/// Returns `SWH_OK`; `SWH_NULL_ARGUMENT` when an argument is NULL;
/// `SWH_INVALID_HANDLE` when `outcome` is not a live outcome.
///
/// # Safety
/// `outcome` must be NULL or a pointer returned by this library; `out_json` and
/// `out_len` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_outcome_json(
    outcome: *const swh_outcome,
    out_json: *mut *const c_char,
    out_len: *mut usize,
) -> swh_result {
    ffi_boundary! {
        check_null!(outcome, out_json, out_len);
        with_handle(outcome, |o| {
            let json = o.json.get_or_init(|| outcome_json(o));
            // SAFETY: checked non-NULL; the caller promises they are writable. The
            // text lives as long as the handle.
            unsafe { write_str(json, out_json, out_len) }
        })
    }
}

/// Frees an outcome and the buffers borrowed from it. NULL does nothing.
///
/// Returns `SWH_OK` (also for NULL), or `SWH_INVALID_HANDLE` when `outcome` is not a
/// live outcome (for example a second free); nothing is freed then.
///
/// # Safety
/// `outcome` must be NULL or a pointer returned by this library.
#[no_mangle]
pub unsafe extern "C" fn swh_outcome_free(outcome: *mut swh_outcome) -> swh_result {
    ffi_boundary! { release(outcome) }
}

// ---------------------------------------------------------------------------------
// Parse result.

/// Whether the body parsed into alerts.
///
/// Returns `SWH_OK` and writes `*out_ok`; `SWH_NULL_ARGUMENT` when an argument is
/// NULL; `SWH_INVALID_HANDLE` when `parsed` is not a live parse result.
///
/// # Safety
/// `parsed` must be NULL or a pointer returned by `swh_parse`; `out_ok` must be NULL
/// or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_parsed_ok(parsed: *const swh_parsed, out_ok: *mut bool) -> swh_result {
    ffi_boundary! {
        check_null!(parsed, out_ok);
        let ok = with_handle(parsed, |p| p.ok)?;
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { out_ok.write(ok) };
        Ok(())
    }
}

/// The canonical alert(s) as a JSON array: one alert, or two for a position reversal
/// (CLOSE then OPEN); `[]` when the body did not parse.
///
/// On success writes to `*out_json` a pointer to UTF-8 text and to `*out_len` its
/// length; a NUL byte follows the text (not counted). Borrowed from `parsed`: valid
/// until `swh_parsed_free(parsed)`; do not free it.
///
/// Returns `SWH_OK`; `SWH_NULL_ARGUMENT` when an argument is NULL;
/// `SWH_INVALID_HANDLE` when `parsed` is not a live parse result.
///
/// # Safety
/// `parsed` must be NULL or a pointer returned by `swh_parse`; `out_json` and
/// `out_len` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_parsed_alerts_json(
    parsed: *const swh_parsed,
    out_json: *mut *const c_char,
    out_len: *mut usize,
) -> swh_result {
    ffi_boundary! {
        check_null!(parsed, out_json, out_len);
        // SAFETY: checked non-NULL; the caller promises they are writable.
        with_handle(parsed, |p| unsafe { write_str(&p.alerts_json, out_json, out_len) })
    }
}

/// Why the body is not an alert, as a sentence a trader can act on; empty (length 0)
/// when it parsed.
///
/// On success writes to `*out_reason` a pointer to UTF-8 text and to `*out_len` its
/// length; a NUL byte follows the text (not counted). Borrowed from `parsed`: valid
/// until `swh_parsed_free(parsed)`; do not free it.
///
/// Returns `SWH_OK`; `SWH_NULL_ARGUMENT` when an argument is NULL;
/// `SWH_INVALID_HANDLE` when `parsed` is not a live parse result.
///
/// # Safety
/// `parsed` must be NULL or a pointer returned by `swh_parse`; `out_reason` and
/// `out_len` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn swh_parsed_reason(
    parsed: *const swh_parsed,
    out_reason: *mut *const c_char,
    out_len: *mut usize,
) -> swh_result {
    ffi_boundary! {
        check_null!(parsed, out_reason, out_len);
        // SAFETY: checked non-NULL; the caller promises they are writable.
        with_handle(parsed, |p| unsafe { write_str(&p.reason, out_reason, out_len) })
    }
}

/// Frees a parse result and the buffers borrowed from it. NULL does nothing.
///
/// Returns `SWH_OK` (also for NULL), or `SWH_INVALID_HANDLE` when `parsed` is not a
/// live parse result (for example a second free); nothing is freed then.
///
/// # Safety
/// `parsed` must be NULL or a pointer returned by `swh_parse`.
#[no_mangle]
pub unsafe extern "C" fn swh_parsed_free(parsed: *mut swh_parsed) -> swh_result {
    ffi_boundary! { release(parsed) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        let mut p = std::ptr::null();
        let mut n = 0;
        assert_eq!(unsafe { swh_last_error_message(&mut p, &mut n) }, swh_result::SWH_OK);
        let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn a_panic_becomes_a_status_code() {
        fn boom() -> swh_result {
            ffi_boundary! {
                panic!("boom");
            }
        }
        assert_eq!(boom(), swh_result::SWH_PANIC);
        assert!(last_error().contains("boom"), "{}", last_error());
    }

    #[test]
    fn the_registry_holds_no_address_as_it_is() {
        let parsed = || swh_parsed { ok: true, alerts_json: with_nul("[]".into()), reason: with_nul(String::new()) };
        // Enough that every shard also uses its map, not only its slots.
        let handles: Vec<*mut swh_parsed> =
            (0..(4 * SLOTS) << SHARD_BITS).map(|_| register(Box::new(parsed()))).collect();
        for &h in &handles {
            assert_eq!(with_handle(h, |p| p.ok).ok(), Some(true));
            assert!(with_handle(h.cast::<swh_outcome>(), |_| ()).is_err(), "a parse result is not an outcome");
            assert!(with_engine(h.cast::<swh_engine>(), |_| ()).is_err(), "a parse result is not an engine");
            // A pointer into a handle is not the handle, whatever its type tag.
            let inside = (h as usize + 2) as *const swh_parsed;
            assert!(with_handle(inside, |_| ()).is_err());
            assert!(with_handle(inside.cast::<swh_outcome>(), |_| ()).is_err());
        }
        let addresses: std::collections::HashSet<usize> = handles.iter().map(|&h| h as usize).collect();
        let mut overflowed = 0;
        for shard in &SHARDS {
            let more = shard.more.read().unwrap();
            assert_eq!(shard.more_len.load(Ordering::Relaxed), more.len());
            let slots = shard.slots.iter().map(|s| s.load(Ordering::Relaxed));
            // An entry equal to a live block's address would keep it "reachable" for valgrind.
            assert!(slots.chain(more.iter().copied()).all(|entry| !addresses.contains(&entry)));
            overflowed += usize::from(!more.is_empty());
        }
        assert!(overflowed > 0, "no shard used its map");
        for &h in &handles {
            assert!(release(h).is_ok());
            assert!(release(h).is_err(), "a second free is refused");
            assert!(with_handle(h, |_| ()).is_err());
        }
        for shard in &SHARDS {
            assert!(shard.slots.iter().all(|s| s.load(Ordering::Relaxed) == 0));
            assert!(shard.more.read().unwrap().is_empty() && shard.more_len.load(Ordering::Relaxed) == 0);
        }
    }

    #[test]
    fn a_message_with_nul_stays_one_c_string() {
        set_last_error("a\0b");
        assert_eq!(last_error(), "a?b");
        clear_last_error();
        assert_eq!(last_error(), "");
    }
}
