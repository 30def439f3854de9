//! Who may see which message: the visibility rule, and the index keys that make it fast to query.
//!
//! The rule: the user and the orchestrator see every message; a specialist sees a message iff it
//! sent it, is named in its audience, or the audience is `all`. (The seed's praetorium hid a
//! specialist's own replies from it; legio does not.)

use crate::message::{Audience, Message};
use crate::name::{AgentName, Participant};

/// Whose view of a conversation is asked for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Viewer<'a> {
    /// The user or the orchestrator: sees every message.
    Everything,
    /// A specialist: sees what it sent, what names it, and what is addressed to all.
    Specialist(&'a AgentName),
}

/// Whether `viewer` may see `message`.
pub fn can_see(viewer: Viewer<'_>, message: &Message) -> bool {
    match viewer {
        Viewer::Everything => true,
        Viewer::Specialist(name) => {
            message.sender.agent() == Some(name)
                || match &message.audience {
                    Audience::All => true,
                    Audience::Only(list) => list.iter().any(|p| p.agent() == Some(name)),
                }
        }
    }
}

/// A key of the visibility index: under which heading a message is listed.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum VisibilityKey {
    /// Every message is listed here: the view of the user and the orchestrator.
    Everything,
    /// Messages addressed to all.
    All,
    /// Messages naming this participant in their audience, or sent by this agent.
    Participant(Participant),
}

impl VisibilityKey {
    /// The key as bytes for an index: `*`, `all`, or the participant's name. None of these can
    /// collide: `*` is no valid name, and `all` is reserved.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Everything => b"*",
            Self::All => b"all",
            Self::Participant(p) => p.as_str().as_bytes(),
        }
    }

    /// The keys whose lists together hold exactly what `viewer` may see.
    pub fn for_viewer(viewer: Viewer<'_>) -> Vec<VisibilityKey> {
        match viewer {
            Viewer::Everything => vec![Self::Everything],
            Viewer::Specialist(name) => {
                vec![
                    Self::Participant(Participant::Agent(name.clone())),
                    Self::All,
                ]
            }
        }
    }
}

/// The index keys under which `message` is listed: `Everything`; `All` if addressed to all; one per
/// named audience member; and the sending agent. Sorted, without duplicates.
pub fn visibility_keys(message: &Message) -> Vec<VisibilityKey> {
    let mut keys = vec![VisibilityKey::Everything];
    match &message.audience {
        Audience::All => keys.push(VisibilityKey::All),
        Audience::Only(list) => keys.extend(list.iter().cloned().map(VisibilityKey::Participant)),
    }
    if let Participant::Agent(_) = &message.sender {
        keys.push(VisibilityKey::Participant(message.sender.clone()));
    }
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{agent, message};

    fn check(sender: &str, audience: &str, viewer: &str, expected: bool) {
        let m = message(1, sender, audience, "hi");
        let name = agent(viewer);
        assert_eq!(
            can_see(Viewer::Specialist(&name), &m),
            expected,
            "{sender} -> {audience}, seen by {viewer}"
        );
    }

    #[test]
    fn specialist_rule() {
        check("user", "vorenus", "vorenus", true);
        check("user", "vorenus", "pullo", false);
        check("user", "vorenus,pullo", "pullo", true);
        check("user", "all", "pullo", true);
        check("vorenus", "user", "vorenus", true); // its own reply
        check("vorenus", "user", "pullo", false);
        check("legatus", "user", "pullo", false);
        check("pullo", "vorenus", "vorenus", true);
    }

    #[test]
    fn everything_sees_all() {
        let m = message(1, "vorenus", "user", "hi");
        assert!(can_see(Viewer::Everything, &m));
    }
}
