//! Reading and showing what a request asks: a positive delta, the names of its nodes.

use super::{Error, Result};
use crate::model::echo;
use crate::provision::NodeRef;

/// The names of the nodes in a request, for a log line: each cut short and escaped, and at
/// most [`NodeList::SHOWN`] of them, then a count of the rest.
pub(super) struct NodeList<'a>(pub(super) &'a [NodeRef]);

impl NodeList<'_> {
    const SHOWN: usize = 10;
}

impl std::fmt::Display for NodeList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[")?;
        for (i, n) in self.0.iter().take(Self::SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{:?}", echo(&n.name))?;
        }
        if self.0.len() > Self::SHOWN {
            write!(f, ", and {} more", self.0.len() - Self::SHOWN)?;
        }
        f.write_str("]")
    }
}

pub(super) fn positive(delta: i32, message: impl FnOnce() -> String) -> Result<u32> {
    match u32::try_from(delta) {
        Ok(d) if d > 0 => Ok(d),
        _ => Err(Error::InvalidRequest(message())),
    }
}
