//! Proptest strategies shared by the parsing property tests.

use proptest::prelude::*;
use strategy_webhook::alert::{Action, ActionKind, ActionWord};

/// Any action a sender can write: the four canonical ones and the four words.
pub fn action() -> impl Strategy<Value = ActionKind> {
    prop_oneof![
        Just(ActionKind::Canonical(Action::Open)),
        Just(ActionKind::Canonical(Action::Close)),
        Just(ActionKind::Canonical(Action::Modify)),
        Just(ActionKind::Canonical(Action::Cancel)),
        Just(ActionKind::Word(ActionWord::Buy)),
        Just(ActionKind::Word(ActionWord::Sell)),
        Just(ActionKind::Word(ActionWord::Entry)),
        Just(ActionKind::Word(ActionWord::Exit)),
    ]
}
