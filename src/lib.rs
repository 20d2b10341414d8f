//! # strategy-webhook
//!
//! Turns trading alerts into broker orders. A raw webhook body (JSON or plain text)
//! is parsed into canonical [`alert::Alert`]s, decided against a strategy snapshot,
//! built into orders for every bot of the strategy, and formatted in each bot's
//! broker's own wire format.
//!
//! The core does no I/O: no sockets, files, threads, environment or clock. The host
//! passes the time in as `now` (Unix milliseconds).
#![warn(missing_docs)]

pub mod alert;
pub mod broker;
pub mod decide;
pub mod decimal;
pub mod engine;
#[cfg(feature = "ffi")]
pub mod ffi;
pub mod order;
pub mod outcome;
pub mod state;
pub mod strategy;

pub use alert::{parse, Alert, ParseError};
pub use engine::{validate, Engine, EngineError, MAX_BODY};
pub use outcome::{Decision, Level, LogRecord, Outcome};
pub use state::{Limits, MemoryStore, StateStore};
pub use strategy::{Strategy, TokenHash};
