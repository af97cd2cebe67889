//! The seeded bug that a machine carries, if any (SPEC.md §12.3): the one
//! hook both machines' seeded bugs go through. Why it is a `cfg` and why
//! each hook is a plain call: `coordinator/mutant.rs`'s header.

/// The seeded bug of kind `M` that a machine carries: always none, and no
/// bytes, in a build without `--cfg single_flight_mutants`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Seeded<M>(
    #[cfg(single_flight_mutants)] Option<M>,
    #[cfg(not(single_flight_mutants))] std::marker::PhantomData<M>,
);

impl<M> Default for Seeded<M> {
    fn default() -> Seeded<M> {
        #[cfg(single_flight_mutants)]
        return Seeded(None);
        #[cfg(not(single_flight_mutants))]
        Seeded(std::marker::PhantomData)
    }
}

impl<M: PartialEq> Seeded<M> {
    /// A machine that carries `bug`.
    #[cfg(single_flight_mutants)]
    pub(crate) fn new(bug: Option<M>) -> Seeded<M> {
        Seeded(bug)
    }

    /// `shipped`, or `seeded` in a machine that carries `bug`; `shipped`
    /// in every build without the `cfg`, which carries none.
    #[inline(always)]
    #[cfg_attr(not(single_flight_mutants), allow(unused_variables))]
    pub(crate) fn hook<T>(&self, bug: M, shipped: T, seeded: T) -> T {
        #[cfg(single_flight_mutants)]
        if self.0 == Some(bug) {
            return seeded;
        }
        shipped
    }
}
