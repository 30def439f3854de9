//! The names the runtime's API takes: a parsed `ConversationKey`, `AgentName` or `Participant`,
//! or text parsed once, here at the edge. A host that parsed a name passes it as it is; it is
//! never turned back into text and parsed again.

use legio_core::{AgentName, ConversationKey, NameError, Participant};

/// A value the API accepts as a `T`: `T` itself (owned or borrowed), or text to parse.
pub trait IntoName<T> {
    /// The parsed name.
    fn into_name(self) -> Result<T, NameError>;
}

macro_rules! into_name {
    ($t:ty, $parse:expr) => {
        impl IntoName<$t> for $t {
            fn into_name(self) -> Result<$t, NameError> {
                Ok(self)
            }
        }
        impl IntoName<$t> for &$t {
            fn into_name(self) -> Result<$t, NameError> {
                Ok(self.clone())
            }
        }
        impl IntoName<$t> for &str {
            fn into_name(self) -> Result<$t, NameError> {
                $parse(self)
            }
        }
        impl IntoName<$t> for &String {
            fn into_name(self) -> Result<$t, NameError> {
                $parse(self.as_str())
            }
        }
    };
}

into_name!(ConversationKey, ConversationKey::new);
into_name!(AgentName, AgentName::new);
into_name!(Participant, Participant::parse);

impl IntoName<Participant> for AgentName {
    fn into_name(self) -> Result<Participant, NameError> {
        Ok(Participant::Agent(self))
    }
}

impl IntoName<Participant> for &AgentName {
    fn into_name(self) -> Result<Participant, NameError> {
        Ok(Participant::Agent(self.clone()))
    }
}
