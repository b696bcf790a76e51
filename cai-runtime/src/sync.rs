//! Locking that survives a panic elsewhere, and a map of values made once per key.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

/// A mutex's guard; a panic elsewhere while it was held does not poison it for the process
/// (every value caijit keeps behind a mutex is valid between statements).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A map whose values are made at most once per key: concurrent first users of a key wait
/// for one maker (users of other keys are not held up), and a maker that fails (or panics)
/// leaves the key empty for the next user to try again.
pub struct OnceMap<K, V> {
    slots: Mutex<HashMap<K, Arc<Mutex<Option<V>>>>>,
}

impl<K, V> Default for OnceMap<K, V> {
    fn default() -> Self {
        OnceMap { slots: Mutex::new(HashMap::new()) }
    }
}

impl<K: Eq + Hash, V: Clone> OnceMap<K, V> {
    /// The value of `key`, made by `make` if no one made it yet. `make` runs holding
    /// `key`'s slot, so it must not ask this map for a value (its own key would wait for
    /// itself; two makers could wait for each other).
    pub fn get_or_try_insert_with<E>(&self, key: K, make: impl FnOnce() -> Result<V, E>) -> Result<V, E> {
        let slot = lock(&self.slots).entry(key).or_default().clone();
        let mut value = lock(&slot);
        if let Some(v) = &*value {
            return Ok(v.clone());
        }
        let v = make()?;
        *value = Some(v.clone());
        Ok(v)
    }
}

impl<K, V> std::fmt::Debug for OnceMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnceMap { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    #[test]
    fn one_maker_per_key_under_contention() {
        let map: OnceMap<u32, Arc<u32>> = OnceMap::default();
        let made = AtomicUsize::new(0);
        let barrier = Barrier::new(8);
        let values: Vec<Arc<u32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        map.get_or_try_insert_with(7, || -> Result<_, ()> {
                            made.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            Ok(Arc::new(7))
                        })
                        .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(made.load(Ordering::SeqCst), 1);
        assert!(values.iter().all(|v| Arc::ptr_eq(v, &values[0])));
    }

    #[test]
    fn a_failed_maker_leaves_the_key_empty() {
        let map: OnceMap<&str, u32> = OnceMap::default();
        assert_eq!(map.get_or_try_insert_with("k", || Err("no")), Err("no"));
        assert_eq!(map.get_or_try_insert_with("k", || Ok::<_, &str>(3)), Ok(3));
        assert_eq!(map.get_or_try_insert_with("k", || Ok::<_, &str>(4)), Ok(3));
    }
}
