//! `EngineName`: a name on the spec's `engines` axis (a built-in adapter's or an
//! `[engine.NAME]` table's).

use std::fmt;

use super::def::DEFAULT_ENGINE;

/// A name on the `engines` axis (`memdial`, `llama.cpp`, a table's `NAME`). It reads
/// as its text: `Display` and `Debug` print what the string would (`memdial`,
/// `"memdial"`), so messages naming an engine are unchanged.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EngineName(String);

impl EngineName {
    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is memdial's own engine ([`DEFAULT_ENGINE`]).
    pub fn is_memdial(&self) -> bool {
        self.0 == DEFAULT_ENGINE
    }
}

impl From<&str> for EngineName {
    fn from(s: &str) -> Self {
        EngineName(s.to_string())
    }
}

impl From<String> for EngineName {
    fn from(s: String) -> Self {
        EngineName(s)
    }
}

impl std::ops::Deref for EngineName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EngineName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for EngineName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq<str> for EngineName {
    fn eq(&self, o: &str) -> bool {
        self.0 == o
    }
}

impl PartialEq<&str> for EngineName {
    fn eq(&self, o: &&str) -> bool {
        self.0 == *o
    }
}

impl PartialEq<String> for EngineName {
    fn eq(&self, o: &String) -> bool {
        &self.0 == o
    }
}

impl PartialEq<EngineName> for String {
    fn eq(&self, o: &EngineName) -> bool {
        *self == o.0
    }
}

#[cfg(test)]
mod tests {
    use super::EngineName;

    /// Messages name an engine exactly as they did with a `String`.
    #[test]
    fn an_engine_name_prints_and_compares_as_its_text() {
        let n = EngineName::from("llama.cpp");
        assert_eq!(format!("{n} {n:?}"), "llama.cpp \"llama.cpp\"");
        let owned = String::from("llama.cpp");
        assert_eq!(n, "llama.cpp");
        assert_eq!(n, *"llama.cpp");
        assert_eq!(owned, n);
        assert_eq!(n, owned);
        assert!(!n.is_memdial() && EngineName::from("memdial").is_memdial());
    }
}
