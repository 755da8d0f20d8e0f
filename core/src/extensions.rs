//! A type map for plugin-private per-turn data.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;

/// A map from a type to one value of that type, for data that plugins keep on a
/// [`Turn`](crate::Turn) without it being visible to users or other plugins.
///
/// Key it by a newtype you own (`struct MyState(..)`) so no two plugins collide.
/// User-visible string values belong in [`Variables`](crate::Variables) instead.
#[derive(Default)]
pub struct Extensions {
    map: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl Extensions {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts `value`, returning the value of the same type that was there before.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        self.map
            .insert(TypeId::of::<T>(), Box::new(value))
            .and_then(|old| old.downcast().ok().map(|b| *b))
    }

    /// The value of type `T`, if one was inserted.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map
            .get(&TypeId::of::<T>())
            .and_then(|b| b.downcast_ref())
    }

    /// The value of type `T`, mutably, if one was inserted.
    pub fn get_mut<T: Send + Sync + 'static>(&mut self) -> Option<&mut T> {
        self.map
            .get_mut(&TypeId::of::<T>())
            .and_then(|b| b.downcast_mut())
    }

    /// Removes and returns the value of type `T`.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<T> {
        self.map
            .remove(&TypeId::of::<T>())
            .and_then(|old| old.downcast().ok().map(|b| *b))
    }

    /// Number of values held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no value is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Marker(u32);

    #[test]
    fn insert_get_replace_remove() {
        let mut ext = Extensions::new();
        assert_eq!(ext.insert(Marker(1)), None);
        assert_eq!(ext.insert(Marker(2)), Some(Marker(1)));
        assert_eq!(ext.get::<Marker>(), Some(&Marker(2)));
        assert_eq!(ext.get::<u8>(), None);
        assert_eq!(ext.remove::<Marker>(), Some(Marker(2)));
        assert!(ext.is_empty());
    }
}
