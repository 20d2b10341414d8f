//! # strategy-webhook
//!
//! Turns trading alerts into broker orders. A raw webhook body (JSON or plain text)
//! is parsed into canonical [`alert::Alert`]s, decided against a strategy snapshot,
//! built into orders for every bot of the strategy, and formatted in each bot's
//! broker's own wire format.
//!
//! The modules form floors, each importing only from the floors below it (a test,
//! `tests/layers.rs`, holds them to it):
//!
//! | floor | modules | holds |
//! |---|---|---|
//! | 0 | [`decimal`], [`digest`], [`state`] | exact numbers; short SHA-256 inputs; dedup and rate windows |
//! | 1 | [`model`] | orders, contracts, pairs, dates, instrument keys, the word enums |
//! | 2 | [`alert`], [`broker`] | bytes → canonical alerts; orders → each broker's requests and answers |
//! | 3 | [`strategy`] | the snapshot |
//! | 4 | [`mod@decide`] | the strategy's rules → decided steps or a refusal |
//! | 5 | [`builder`] | decided steps → neutral orders for each bot |
//! | 6 | [`outcome`] | the answer, the requests with their orders, the logs |
//! | 7 | [`engine`] | tokens, order of checks, windows |
//! | 8 | `ffi` | the C ABI |
//!
//! The core does no I/O: no sockets, files, threads, environment or clock. The host
//! passes the time in as `now` (Unix milliseconds).
#![warn(missing_docs)]

pub mod alert;
pub mod broker;
pub mod builder;
pub mod decide;
pub mod decimal;
pub mod digest;
pub mod engine;
#[cfg(feature = "ffi")]
pub mod ffi;
pub mod model;
pub mod outcome;
pub mod state;
pub mod strategy;

pub use alert::{parse, Alert, ParseError};
pub use broker::{Answer, Broker, BrokerId};
pub use decide::{decide, Decided, Refusal};
pub use engine::{validate, Engine, EngineError, MAX_BODY};
pub use model::{InstrumentKey, Order, OrderError, RequestKind};
pub use outcome::{Decision, ErrorKind, Level, LogRecord, OrderRequest, Outcome};
pub use state::{Limits, MemoryStore, Settled, StateStore};
pub use strategy::{Strategy, TokenHash};
