//! The spec's engines as written: the `[engine.NAME]` adapter tables and the built-in
//! adapters (`def`), their command templates (`template`), and a table resolved and
//! checked against the built-ins (`resolve`), and a name on the axis (`name`). The adapters that run them are
//! `crate::sweep::engines`.

pub mod def;
pub mod name;
pub mod resolve;
pub mod template;
