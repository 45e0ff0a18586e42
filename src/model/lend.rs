//! Layer weights whose small decoded vectors live in the arena: a [`Lent`] guard
//! holds the weights and the arena group their vectors were moved out of, and gives
//! the vectors back when it is dropped (on every path, errors included), so no caller
//! has to pair a load with a hand-written return.

/// Weights that borrow buffers of an arena group while loaded.
pub trait Recycle: Sized {
    /// The arena group the buffers come from.
    type Arena;
    /// Gives the buffers back to `sc` (the weights end here).
    fn recycle(self, sc: &mut Self::Arena);
}

/// Weights `W` loaded into buffers taken from `sc`, returned to it on drop.
pub struct Lent<'a, W: Recycle> {
    /// `None` only while dropping.
    w: Option<W>,
    sc: &'a mut W::Arena,
}

impl<'a, W: Recycle> Lent<'a, W> {
    /// Wraps weights `w` whose buffers came from `sc`.
    pub fn new(w: W, sc: &'a mut W::Arena) -> Self {
        Lent { w: Some(w), sc }
    }

    /// The weights and the rest of their arena group, used side by side.
    pub fn split(&mut self) -> (&W, &mut W::Arena) {
        let w = self
            .w
            .as_ref()
            .expect("Lent holds its weights until dropped");
        (w, &mut *self.sc)
    }
}

impl<W: Recycle> Drop for Lent<'_, W> {
    fn drop(&mut self) {
        if let Some(w) = self.w.take() {
            w.recycle(self.sc);
        }
    }
}
