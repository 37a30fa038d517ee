//! The chat-template renderer with hostile templates and messages: a template and the
//! messages (one per line, roles in turn) split at the first NUL; errors or text, on a fuel
//! budget, never a panic or a hang.
#![no_main]
use libfuzzer_sys::fuzz_target;
use toy::chat_template::{ChatMessage, ChatTemplate};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (source, rest) = text.split_once('\0').unwrap_or((&text, "hello"));
    let Ok(t) = ChatTemplate::new(source, "<s>", "</s>") else {
        return;
    };
    let roles = ["system", "user", "assistant", "tool"];
    let msgs: Vec<ChatMessage> = rest
        .lines()
        .enumerate()
        .map(|(i, l)| ChatMessage::new(roles[i % 4], l))
        .collect();
    let _ = t.render(&msgs, true);
});
