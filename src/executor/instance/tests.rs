//! The instance's unit tests: bindings, transactions, folding and the arrays handed out.

use super::*;
use crate::executor::plan::tests::{graph, plan};

/// x, w (inputs) -> c = copy(w) -> out = copy(c); out the output: `c` reads only `w`.
fn instance() -> Instance {
    let json = graph(&[("x", "", 0), ("w", "", 0), ("c", "__copy", 1), ("out", "__copy", 2)], &[0, 1, 2, 3], &[3]);
    Instance::new(plan(&json), false).unwrap()
}

fn weight(v: u8, len: usize) -> Arc<Weight> {
    Arc::new(Weight::copy_of(&vec![v; len]).unwrap())
}

fn output(inst: &mut Instance) -> Vec<u8> {
    let view = inst.entry_view(3).unwrap();
    view.to_vec()
}

#[test]
fn a_parameter_is_bound_without_a_copy_where_the_slot_can_share() {
    let mut inst = instance();
    let w = weight(7, 16);
    assert!(inst.set_param("w", 1, w.clone()).unwrap());
    assert!(matches!(inst.slot(1), SlotMemory::Weight(bound) if Arc::ptr_eq(bound, &w)));
    assert!(inst.param_names.contains("w"));
    inst.run().unwrap();
    assert_eq!(output(&mut inst), vec![7; 16]);
    // Folded: `c` was computed once, from the weight, and is what `out` copies.
    assert_eq!(inst.layout().folded, vec![true, false]);
    // A weight shorter than the slot cannot back it: its bytes are written instead.
    let mut inst = instance();
    let e = inst.set_param("w", 1, weight(1, 8)).unwrap_err().to_string();
    assert!(e.contains("parameter 'w'"), "{e}");
}

#[test]
fn writing_a_weight_gives_a_private_copy_and_refolds() {
    let mut inst = instance();
    let w = weight(7, 16);
    inst.set_param("w", 1, w.clone()).unwrap();
    inst.run().unwrap();
    inst.write_entry_bytes(1, &[9; 16]).unwrap();
    assert!(matches!(inst.slot(1), SlotMemory::Owned(_)));
    assert_eq!(&*w.bytes().unwrap(), &[7; 16], "the weight itself is untouched");
    inst.run().unwrap();
    assert_eq!(output(&mut inst), vec![9; 16]);
    assert_eq!(inst.layout().folded, vec![false, false], "a private input is not folded from");
}

#[test]
fn sharing_out_freezes_memory_unless_a_view_holds_it() {
    let mut inst = instance();
    inst.write_entry_bytes(1, &[3; 16]).unwrap();
    let before = inst.entry_data(1);
    let shared = inst.share_out(1).unwrap();
    assert_eq!(shared.as_ptr(), before, "nobody else held it: frozen in place");
    // A host's view of the private memory: sharing must not let its writes reach the sharers.
    let mut inst = instance();
    inst.write_entry_bytes(1, &[4; 16]).unwrap();
    let view = inst.entry_view(1).unwrap();
    let shared = inst.share_out(1).unwrap();
    assert_ne!(shared.as_ptr(), view.data_ptr().cast_const(), "a copy, since the view still holds the memory");
    assert_eq!((&*shared.bytes().unwrap(), view.to_vec()), (&[4u8; 16][..], vec![4; 16]));
}

/// A call that fails after changing bindings puts everything back: slot memory, entry
/// addresses, parameters, the layout, and bytes it wrote in place.
#[test]
fn a_failed_transaction_puts_everything_back() {
    let mut inst = instance();
    inst.write_entry_bytes(0, &[1; 16]).unwrap();
    inst.set_param("w", 1, weight(7, 16)).unwrap();
    inst.run().unwrap();
    let view = inst.entry_view(0).unwrap();
    let addresses: Vec<_> = (0..4).map(|e| inst.entry_data(e)).collect();
    let (layout, names) = (inst.layout().clone(), inst.param_names.clone());
    let e = inst
        .transaction(|st| {
            st.write_entry_bytes(0, &[3; 16])?;
            st.set_param("w", 1, weight(9, 16))?;
            st.set_param("x", 0, weight(5, 16))?;
            st.set_fold(Folding::Off);
            st.prepare()?;
            Err::<(), _>(crate::Error::value("failed late"))
        })
        .unwrap_err();
    assert!(e.to_string().contains("failed late"));
    assert_eq!((0..4).map(|e| inst.entry_data(e)).collect::<Vec<_>>(), addresses);
    assert_eq!((inst.layout().homes.clone(), inst.layout().folded.clone()), (layout.homes, layout.folded));
    assert_eq!(inst.param_names, names);
    assert_eq!(view.to_vec(), vec![1; 16], "bytes written in place are put back");
    assert!(ObjRef::ptr_eq(&inst.entry_view(0).unwrap(), &view), "the same array is handed out");
    inst.run().unwrap();
    assert_eq!(output(&mut inst), vec![7; 16]);
}

/// Freezing an executor's own memory into a shared weight needs no copy inside a transaction
/// either: the journal's hold on the memory is not a writer's.
#[test]
fn sharing_out_inside_a_transaction_freezes_in_place() {
    let mut inst = instance();
    inst.write_entry_bytes(1, &[3; 16]).unwrap();
    let before = inst.entry_data(1);
    let shared = inst.transaction(|st| st.share_out(1)).unwrap();
    assert_eq!(shared.as_ptr(), before);
    // Put back on failure: the slot is the executor's own memory again, writable in place.
    let mut inst = instance();
    inst.write_entry_bytes(1, &[4; 16]).unwrap();
    let before = inst.entry_data(1);
    inst.transaction(|st| st.share_out(1).and(Err::<(), _>(crate::Error::value("no")))).unwrap_err();
    assert!(matches!(inst.slot(1), SlotMemory::Owned(_)));
    inst.write_entry_bytes(1, &[5; 16]).unwrap();
    assert_eq!(inst.entry_data(1), before, "written in place, as before");
}

/// Whatever leaves an operator's argument without memory, the operator is not launched.
#[test]
fn an_operator_is_never_launched_on_an_entry_without_memory() {
    let mut inst = instance();
    inst.set_fold(Folding::Off);
    inst.set_param("w", 1, weight(7, 16)).unwrap();
    inst.run().unwrap();
    inst.ops.unbind(2);
    let e = inst.run().unwrap_err().to_string();
    assert!(e.contains("entry 2") && e.contains("no memory"), "{e}");
}

/// Under `Folding::Shared`, a weight stays folded for a while after its sharer goes (a sharer
/// per request must not make the long-lived executor derive its weights again each time), and
/// is unfolded once that while is over.
#[test]
fn a_weight_stays_folded_a_while_after_its_sharer_goes() {
    let mut a = instance();
    a.set_fold(Folding::Shared);
    a.keep_folded = std::time::Duration::from_millis(300);
    a.set_param("w", 1, weight(7, 16)).unwrap();
    a.run().unwrap();
    assert_eq!(a.layout().folded, vec![false, false], "alone: nothing folded, as upstream");
    for _ in 0..3 {
        let mut b = instance();
        b.set_fold(Folding::Shared);
        b.set_param("w", 1, a.share_out(1).unwrap()).unwrap();
        b.run().unwrap();
        a.run().unwrap();
        assert_eq!(a.layout().folded, vec![true, false], "shared: folded");
        let derived = a.derived_weights();
        assert_eq!(derived.len(), 1);
        assert!(Arc::ptr_eq(&derived[0].1, &b.derived_weights()[0].1), "derived once for both");
        drop(b);
        a.run().unwrap();
        assert_eq!(a.layout().folded, vec![true, false], "the sharer gone: still folded");
        assert!(Arc::ptr_eq(&a.derived_weights()[0].1, &derived[0].1), "the same derived weight");
        assert_eq!(output(&mut a), vec![7; 16]);
    }
    std::thread::sleep(std::time::Duration::from_millis(350));
    a.run().unwrap();
    assert_eq!(a.layout().folded, vec![false, false], "alone long enough: unfolded");
    assert!(a.derived_weights().is_empty());
    assert_eq!(output(&mut a), vec![7; 16]);
}

/// `get_output(i, out)`: the entry's bytes into any array of its byte size, refused otherwise.
#[test]
fn copying_an_entry_out_needs_its_byte_size() {
    let mut inst = instance();
    inst.set_param("w", 1, weight(6, 16)).unwrap();
    inst.run().unwrap();
    let out = NDArray::empty(&[16], "uint8".parse().unwrap(), crate::dlpack::DLDevice::CPU).unwrap();
    inst.copy_entry_to(3, out.raw()).unwrap();
    assert_eq!(out.to_vec(), vec![6; 16]);
    let small = NDArray::empty(&[3], crate::dlpack::DLDataType::F32, crate::dlpack::DLDevice::CPU).unwrap();
    let e = inst.copy_entry_to(3, small.raw()).unwrap_err().to_string();
    assert!(e.contains("cannot copy 16 bytes into 12 bytes"), "{e}");
}

#[test]
fn an_entry_array_is_handed_out_again_while_it_shows_the_entry() {
    let mut inst = instance();
    inst.set_param("w", 1, weight(5, 16)).unwrap();
    inst.run().unwrap();
    let a = inst.entry_view(3).unwrap();
    let b = inst.entry_view(3).unwrap();
    assert!(ObjRef::ptr_eq(&a, &b));
    // A weight's array is a copy, new each time: writing it reaches nothing.
    let (w1, w2) = (inst.entry_view(1).unwrap(), inst.entry_view(1).unwrap());
    assert!(!ObjRef::ptr_eq(&w1, &w2) && w1.data_ptr() != w2.data_ptr());
}
