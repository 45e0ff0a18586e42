pub mod placeholder {}
pub mod tokenizer;
