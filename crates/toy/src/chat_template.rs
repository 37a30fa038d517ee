//! Chat templates (`tokenizer.chat_template`, Jinja) rendered with `minijinja`.
