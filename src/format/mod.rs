//! The format layer: what a checkpoint directory holds and what it must hold — the
//! config, the tensor table it implies, shard headers, checksums, the tokenizer and
//! chat template, the lossless layout — and the checks made before any work.
//!
//! - [`config`]: `config.json` in Moonshot's and transformers' forms;
//! - [`config_keys`]: key-by-key defaults, null and type rules of the reference config classes;
//! - [`schema`]: the tensor table a config implies (names, dtypes, shapes);
//! - [`shard`]: the shard table (tensor locations, shard files) and safetensors shard headers;
//! - [`checkpoint`]: a directory's tensors and shards (and its lossless pack, if any);
//! - [`manifest`]: the per-tensor checksum manifest `tensors.sha256`;
//! - [`limits`]: values refused before work (dimensions against the checkpoint, thread counts; the config's own ranges are [`config::ranges`]);
//! - [`integrity`]: non-finite values and E8M0 NaN scales are errors, never output;
//! - [`inspect`]: architecture summary and checkpoint validation;
//! - [`tokenizer`]: the Kimi tiktoken tokenizer and chat template;
//! - [`chat`]: chat prompts from the checkpoint's own Jinja `chat_template`;
//! - [`lossless`]: the lossless streamed layout (BF16 re-encoded into independent blocks).

pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod config_keys;
pub mod inspect;
pub mod integrity;
pub mod limits;
pub mod lossless;
pub mod manifest;
pub mod schema;
pub mod shard;
pub mod tokenizer;
