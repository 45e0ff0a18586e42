//! One way to add an axis to the sweep.
//!
//! The first axes (budgets, io, prefetch, cache, threads, prompts) are fields of
//! [`super::spec::Spec`] and columns of the first results schema; `engines` came
//! next with the same rules written by hand. Every axis added after them is one
//! declaration: a type implementing [`Axis`] (its values, its default, its name) and
//! a field `NAME: Values<A>` of the spec, declared with
//! `#[serde(default, skip_serializing_if = "Values::is_default")]`. That brings
//! every rule:
//!
//! - **values**: the spec key `NAME` is a list of `A::Value` (serde), default
//!   `[A::default_value()]`;
//! - **spec hash**: the field is left out of the serialised spec while it holds
//!   only the default, so the hash of every existing spec (and so its run
//!   directories and baselines) is unchanged; a spec that sets it gets a new hash;
//! - **point key**: [`Values::coords`] makes the point's [`Coord`]s, appended to
//!   the key as `;NAME=VALUE` only while the spec lists more than the default (as
//!   `;engine=` is);
//! - **results**: the coordinate is the column `NAME` of `results.csv`, appended
//!   after every existing column ([`super::record::row::columns`]).
//!
//! `Spec::points` expands the declared axes innermost, after engines, in the order
//! of [`super::spec::Spec::later_axes`]; a point carries each value typed too (its
//! field `NAME`), which is what the sweep reads, the coordinates' text being only
//! its key and CSV cells. Declared so far: [`super::start::Start`], [`super::layout::Layout`],
//! [`super::concurrency::Concurrency`], [`super::speculate::Speculate`],
//! [`super::depth::Depth`].

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An axis declared after the first results schema.
pub trait Axis {
    /// The spec key, the point-key name and the `results.csv` column.
    const NAME: &'static str;
    /// One value; its `Display` is the point-key and CSV text.
    type Value: Clone + PartialEq + Serialize + DeserializeOwned + std::fmt::Display;
    /// The value every sweep ran with before the axis existed.
    fn default_value() -> Self::Value;
}

/// The values of axis `A` in a spec (a TOML list).
pub struct Values<A: Axis>(pub Vec<A::Value>);

impl<A: Axis> Values<A> {
    /// The spec lists only the default: left out of the spec hash and of point keys.
    pub fn is_default(&self) -> bool {
        self.0.len() == 1 && self.0[0] == A::default_value()
    }

    /// One [`Coord`] per value, in the spec's order.
    pub fn coords(&self) -> Vec<Coord> {
        let in_key = !self.is_default();
        self.0
            .iter()
            .map(|v| Coord {
                name: A::NAME.to_string(),
                value: v.to_string(),
                in_key,
            })
            .collect()
    }
}

impl<A: Axis> Default for Values<A> {
    fn default() -> Self {
        Values(vec![A::default_value()])
    }
}

impl<A: Axis> Clone for Values<A> {
    fn clone(&self) -> Self {
        Values(self.0.clone())
    }
}

impl<A: Axis> std::fmt::Debug for Values<A>
where
    A::Value: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple(A::NAME).field(&self.0).finish()
    }
}

impl<A: Axis> Serialize for Values<A> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, A: Axis> Deserialize<'de> for Values<A> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<A::Value>::deserialize(d)?;
        if v.is_empty() {
            return Err(serde::de::Error::custom(format!(
                "axis `{}` is empty",
                A::NAME
            )));
        }
        if let Some(d) = v.iter().enumerate().find(|(i, x)| v[..*i].contains(x)) {
            return Err(serde::de::Error::custom(format!(
                "axis `{}` lists \"{}\" more than once (each point must be distinct)",
                A::NAME,
                d.1
            )));
        }
        Ok(Values(v))
    }
}

/// A point's value on a declared axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Coord {
    /// The axis ([`Axis::NAME`]).
    pub name: String,
    /// The value as text.
    pub value: String,
    /// The spec lists more than the default: the key names the value.
    pub in_key: bool,
}

/// The cartesian product of `base` (outer) and each axis of `axes` (inner, in
/// order): every combination of one value per axis, appended to `base`.
pub fn product(axes: &[Vec<Coord>]) -> Vec<Vec<Coord>> {
    let mut out: Vec<Vec<Coord>> = vec![vec![]];
    for values in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |c| {
                    let mut p = prefix.clone();
                    p.push(c.clone());
                    p
                })
            })
            .collect();
    }
    out
}
