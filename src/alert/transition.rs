//! Position transitions: `prevMarketPosition` → `marketPosition`, and TradingView's
//! default fill message, both say what happened rather than what to do.

use super::{Action, Direction};

/// A strategy's market position as a charting platform reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// No position.
    Flat,
    /// Long.
    Long,
    /// Short.
    Short,
}

impl Position {
    /// Reads long, short, flat in any case.
    pub fn from_word(s: &str) -> Option<Position> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("flat") {
            Some(Position::Flat)
        } else {
            super::Direction::from_word(s).map(Position::from)
        }
    }

    /// The position a signed size stands for (`-1` short, `0` flat).
    pub fn from_signed(size: &crate::decimal::Decimal) -> Position {
        if size.is_zero() {
            Position::Flat
        } else if size.is_sign_negative() {
            Position::Short
        } else {
            Position::Long
        }
    }
}

impl Position {
    /// The side held: none when flat.
    pub fn side(self) -> Option<Direction> {
        match self {
            Position::Long => Some(Direction::Long),
            Position::Short => Some(Direction::Short),
            Position::Flat => None,
        }
    }
}

impl From<Direction> for Position {
    fn from(d: Direction) -> Self {
        match d {
            Direction::Long => Position::Long,
            Direction::Short => Position::Short,
        }
    }
}

/// What a change of position means as orders: flat → long is OPEN LONG, long → short is
/// CLOSE LONG then OPEN SHORT. An unchanged position yields nothing (`None`): the
/// caller decides whether other fields say what to do.
pub fn transition(prev: Position, next: Position) -> Option<Vec<(Action, Direction)>> {
    use Position::*;
    let steps = match (prev, next) {
        (Flat, Long) => vec![(Action::Open, Direction::Long)],
        (Flat, Short) => vec![(Action::Open, Direction::Short)],
        (Long, Flat) => vec![(Action::Close, Direction::Long)],
        (Short, Flat) => vec![(Action::Close, Direction::Short)],
        (Long, Short) => vec![(Action::Close, Direction::Long), (Action::Open, Direction::Short)],
        (Short, Long) => vec![(Action::Close, Direction::Short), (Action::Open, Direction::Long)],
        (Flat, Flat) | (Long, Long) | (Short, Short) => return None,
    };
    Some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reversal_is_close_then_open() {
        assert_eq!(
            transition(Position::Long, Position::Short).unwrap(),
            vec![(Action::Close, Direction::Long), (Action::Open, Direction::Short)]
        );
        assert_eq!(transition(Position::Flat, Position::Long).unwrap(), vec![(Action::Open, Direction::Long)]);
        assert_eq!(transition(Position::Short, Position::Flat).unwrap(), vec![(Action::Close, Direction::Short)]);
        assert!(transition(Position::Long, Position::Long).is_none());
    }

    #[test]
    fn signed_sizes() {
        use crate::decimal::Decimal;
        assert_eq!(Position::from_signed(&Decimal::from(-1)), Position::Short);
        assert_eq!(Position::from_signed(&Decimal::ZERO), Position::Flat);
        assert_eq!(Position::from_signed(&Decimal::from(3)), Position::Long);
    }
}
