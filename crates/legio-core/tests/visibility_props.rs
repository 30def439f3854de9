//! Property tests of the visibility rule and the index keys that serve it.

use legio_core::{
    can_see, visibility_keys, AgentName, Audience, ConversationKey, Message, MessageId,
    Participant, Timestamp, Viewer, VisibilityKey,
};
use proptest::prelude::*;

const NAMES: [&str; 5] = ["lead", "ann", "bob", "cyd", "dee"];

fn participant() -> impl Strategy<Value = Participant> {
    prop_oneof![
        1 => Just(Participant::User),
        4 => (0..NAMES.len()).prop_map(|i| Participant::Agent(AgentName::new(NAMES[i]).unwrap())),
    ]
}

fn audience() -> impl Strategy<Value = Audience> {
    prop_oneof![
        1 => Just(Audience::All),
        5 => proptest::collection::vec(participant(), 1..4).prop_map(Audience::only),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (participant(), audience()).prop_map(|(sender, audience)| {
        Message::text(
            MessageId::from_parts(Timestamp::EPOCH, [0; 10]),
            ConversationKey::new("p:1").unwrap(),
            sender,
            audience,
            "text",
            Timestamp::EPOCH,
        )
    })
}

proptest! {
    /// The rule itself, stated independently of the implementation.
    #[test]
    fn a_specialist_sees_exactly_what_it_sent_what_names_it_and_broadcasts(m in message(), v in 0..NAMES.len()) {
        let name = AgentName::new(NAMES[v]).unwrap();
        let me = Participant::Agent(name.clone());
        let expected = m.sender == me || m.audience == Audience::All || m.audience.names(&me);
        prop_assert_eq!(can_see(Viewer::Specialist(&name), &m), expected);
        prop_assert!(can_see(Viewer::Everything, &m));
    }

    /// The index keys list a message under a viewer's keys iff the viewer may see it: reading a
    /// viewer's index lists can neither miss a visible message nor leak an invisible one.
    #[test]
    fn index_keys_agree_with_the_rule(m in message(), v in 0..NAMES.len()) {
        let name = AgentName::new(NAMES[v]).unwrap();
        let keys = visibility_keys(&m);
        for viewer in [Viewer::Specialist(&name), Viewer::Everything] {
            let listed = VisibilityKey::for_viewer(viewer).iter().any(|k| keys.contains(k));
            prop_assert_eq!(listed, can_see(viewer, &m));
        }
    }
}
