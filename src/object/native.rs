//! Which deleters are this runtime's. An object header's deleter tells this runtime's cells from a
//! C++ host's (made with upstream's layouts, carrying a deleter of the host's). Each payload type
//! has a deleter of its own (`object_type!`); a type's is noted here as its first object is made,
//! so no table names the types of every family, and a cell is never seen before its deleter is.

use super::{Deleter, ObjectHeader};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Room for the runtime's payload types (fourteen today, and the tests' own).
const SLOTS: usize = 64;

/// The deleters noted so far (0: a free slot), with their types' indices.
static DELETERS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static INDICES: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
/// Serialises noting new types (once per type per process).
static NOTING: Mutex<()> = Mutex::new(());

fn noted(deleter: usize) -> bool {
    DELETERS.iter().map(|d| d.load(Ordering::Acquire)).take_while(|&d| d != 0).any(|d| d == deleter)
}

/// Notes the deleter of a payload type of index `index`, as an object of it is about to be made.
/// Cheap once noted: a scan of the first few slots.
pub(super) fn note(index: u32, deleter: Deleter) {
    let d = deleter as usize;
    if noted(d) {
        return;
    }
    let _one_at_a_time = NOTING.lock().unwrap_or_else(|e| e.into_inner());
    for (slot, slot_index) in DELETERS.iter().zip(&INDICES) {
        match slot.load(Ordering::Acquire) {
            0 => {
                slot_index.store(index, Ordering::Relaxed);
                slot.store(d, Ordering::Release);
                return;
            }
            same if same == d => return,
            // Two payload types of one index would let a downcast read one as the other.
            _ => assert_ne!(
                slot_index.load(Ordering::Relaxed),
                index,
                "object type index {index} is declared by two payload types"
            ),
        }
    }
    panic!("more than {SLOTS} object payload types");
}

/// Whether the object at `obj` is a cell of this runtime (its deleter is one of ours), as opposed
/// to one a host made with upstream's layouts.
///
/// # Safety
/// `obj` must be null or a live object header.
pub unsafe fn is_native(obj: *const ObjectHeader) -> bool {
    // SAFETY: per the contract.
    let Some(header) = (unsafe { obj.as_ref() }) else { return false };
    header.deleter.is_some_and(|deleter| noted(deleter as usize))
}

/// Has forks take the lock that notes native objects.
pub fn handle_forks() {
    crate::backend::fork::guard_static(&NOTING);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI32;

    // Bodies of their own: identical empty functions may be folded into one address (release
    // builds), and the test needs two deleters.
    unsafe extern "C" fn first(_: *mut ObjectHeader) {
        std::hint::black_box(1);
    }
    unsafe extern "C" fn second(_: *mut ObjectHeader) {
        std::hint::black_box(2);
    }

    #[test]
    fn a_deleter_is_noted_once_and_an_index_has_one_type() {
        note(1000, first);
        note(1000, first);
        assert_eq!(DELETERS.iter().filter(|d| d.load(Ordering::Relaxed) == first as *const () as usize).count(), 1);
        let clash = std::panic::catch_unwind(|| note(1000, second));
        assert!(clash.is_err(), "a second type of index 1000 was accepted");
        assert!(!noted(second as *const () as usize));
        let foreign = ObjectHeader { type_index: 1000, ref_counter: AtomicI32::new(1), deleter: Some(second) };
        // SAFETY: a live header.
        assert!(!unsafe { is_native(&foreign) });
        let ours = ObjectHeader { type_index: 1000, ref_counter: AtomicI32::new(1), deleter: Some(first) };
        // SAFETY: a live header.
        assert!(unsafe { is_native(&ours) });
    }
}
