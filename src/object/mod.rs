//! Reference-counted objects with TVM's C layout: a 16-byte header (type index, atomic count,
//! deleter) followed by the payload. Handles given to C point at the header (an NDArray handle at
//! the DLTensor 16 bytes further), so C callers and our Rust code share one count.
//!
//! `ObjRef<T>` is the owning smart pointer (like `Arc`), `AnyObject` its type-erased form.

use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicI32, Ordering};

/// cbindgen:ignore
pub mod type_table;

/// Static type indices of TVM 0.16.
pub mod type_index {
    pub const OBJECT: u32 = 0;
    pub const MODULE: u32 = 1;
    pub const NDARRAY: u32 = 2;
    pub const STRING: u32 = 3;
    pub const ARRAY: u32 = 4;
    pub const MAP: u32 = 5;
    pub const SHAPE_TUPLE: u32 = 6;
    pub const PACKED_FUNC: u32 = 7;
    pub const DISCO_DREF: u32 = 8;
    pub const RPC_OBJECT_REF: u32 = 9;
    pub const CLOSURE: u32 = 10;
    pub const ADT: u32 = 11;
    pub const STATIC_END: u32 = 12;
}

/// The key of a type index, for messages ("?" when unknown).
pub fn type_key_of(index: u32) -> String {
    type_table::table().index_to_key(index).map_or_else(|_| "?".to_string(), str::to_string)
}

#[repr(C)]
pub struct ObjectHeader {
    pub type_index: u32,
    pub ref_counter: AtomicI32,
    pub deleter: Option<unsafe extern "C" fn(*mut ObjectHeader)>,
}

// Upstream's `Object`: the C++ side checks `sizeof(Object) == 16` (cxx/runtime.h).
const _: () = {
    assert!(std::mem::size_of::<ObjectHeader>() == 16);
    assert!(std::mem::offset_of!(ObjectHeader, type_index) == 0);
    assert!(std::mem::offset_of!(ObjectHeader, ref_counter) == 4);
    assert!(std::mem::offset_of!(ObjectHeader, deleter) == 8);
};

/// A payload type of runtime objects, identified by its type index. Sealed: [`payload_of`] and the
/// downcasts trust the index in an object's header to name the payload's type, so each index must
/// belong to one type, which only this crate can promise. Each family declares its own types where
/// it defines them, with `object_type!`; [`native`] learns them as their first objects are made.
pub trait ObjectType: sealed::Sealed + Send + Sync + 'static {
    const TYPE_INDEX: u32;
    /// The deleter of this type's cells: a function of its own (made by `object_type!`), not a
    /// generic instance, so its address is one and the same wherever objects are made and
    /// recognised.
    const DELETER: Deleter;
    /// What a cell holds in front of the header (C++ hosts read a module's vtable pointer there).
    type Prefix: Send + Sync;
    fn prefix() -> Self::Prefix;
}

/// What an object header holds to free the object.
pub type Deleter = unsafe extern "C" fn(*mut ObjectHeader);

/// Declares `$t` an object payload of type index `$index` (an index of its own: TVM's static one,
/// or the one upstream registers for its key, `type_table::upstream_index`), with a deleter of its
/// own. The deleter is the expansion's only unsafe code: a module that forbids unsafe code
/// denies it instead, and the expansion allows it for itself.
macro_rules! object_type {
    ($t:ty, $index:expr) => {
        $crate::object::object_type!($t, $index, (), ());
    };
    // A payload whose cell holds inline elements after it (see `WithTail`).
    ($t:ty, $index:expr, with_tail) => {
        impl $crate::object::sealed::Sealed for $t {}
        impl $crate::object::ObjectType for $t {
            const TYPE_INDEX: u32 = $index;
            type Prefix = ();
            fn prefix() {}
            #[allow(unsafe_code)]
            const DELETER: $crate::object::Deleter = {
                unsafe extern "C" fn delete(obj: *mut $crate::object::ObjectHeader) {
                    // SAFETY: installed only by `ObjRef::new_with_tail` for cells of this type.
                    unsafe { $crate::object::delete_tail_cell::<$t>(obj) }
                }
                delete
            };
        }
    };
    ($t:ty, $index:expr, $prefix:ty, $make_prefix:expr) => {
        impl $crate::object::sealed::Sealed for $t {}
        impl $crate::object::ObjectType for $t {
            const TYPE_INDEX: u32 = $index;
            type Prefix = $prefix;
            fn prefix() -> $prefix {
                $make_prefix
            }
            #[allow(unsafe_code)]
            const DELETER: $crate::object::Deleter = {
                unsafe extern "C" fn delete(obj: *mut $crate::object::ObjectHeader) {
                    // SAFETY: installed only by `ObjRef::new` for cells of this type.
                    unsafe { $crate::object::delete_cell::<$t>(obj) }
                }
                delete
            };
        }
    };
}
pub(crate) use object_type;

/// Which deleters are this runtime's: what tells its cells from a host's.
pub mod native;

pub(crate) mod sealed {
    /// Implemented by the crate's own object payload types only.
    pub trait Sealed {}
}

#[repr(C)]
struct ObjectCell<T: ObjectType> {
    prefix: T::Prefix,
    header: ObjectHeader,
    value: T,
}

/// The cell whose header is at `obj`.
fn cell_of<T: ObjectType>(obj: *mut ObjectHeader) -> *mut ObjectCell<T> {
    obj.cast::<u8>().wrapping_sub(std::mem::offset_of!(ObjectCell<T>, header)).cast()
}

/// Frees a cell of `T`.
///
/// # Safety
/// `obj` must be a cell made by `ObjRef::<T>::new` whose count has reached zero.
pub(crate) unsafe fn delete_cell<T: ObjectType>(obj: *mut ObjectHeader) {
    // SAFETY: per the contract: the allocation is a `Box<ObjectCell<T>>`, freed once.
    drop(unsafe { Box::from_raw(cell_of::<T>(obj)) });
}

/// A payload followed in its cell by inline elements, as upstream lays out an `ArrayNode` (its
/// size and capacity, then the elements): code compiled against upstream's headers reads them
/// there. Made by [`ObjRef::new_with_tail`], freed by its own deleter (`object_type!`'s
/// `with_tail` form).
pub trait WithTail: ObjectType {
    type Item;
    /// How many elements the cell holds: what the deleter drops and frees.
    fn tail_len(&self) -> usize;
}

/// The layout of a cell of `T` with `n` elements, and the elements' offset in it.
fn tail_layout<T: WithTail>(n: usize) -> (std::alloc::Layout, usize) {
    let items = std::alloc::Layout::array::<T::Item>(n).expect("a tail of a size that fits memory");
    let (layout, offset) = std::alloc::Layout::new::<ObjectCell<T>>().extend(items).expect("a cell that fits memory");
    (layout.pad_to_align(), offset)
}

/// Frees a cell of `T` with its elements.
///
/// # Safety
/// `obj` must be a cell made by `ObjRef::<T>::new_with_tail` whose count has reached zero.
pub(crate) unsafe fn delete_tail_cell<T: WithTail>(obj: *mut ObjectHeader) {
    let cell = cell_of::<T>(obj);
    // SAFETY: per the contract: a live cell of `T` with `tail_len` elements after it, laid out by
    // `tail_layout`, dropped and freed once.
    unsafe {
        let n = (*cell).value.tail_len();
        let (layout, offset) = tail_layout::<T>(n);
        let tail = cell.cast::<u8>().add(offset).cast::<T::Item>();
        std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(tail, n));
        std::ptr::drop_in_place(cell);
        std::alloc::dealloc(cell.cast(), layout);
    }
}

/// An owning reference to an object whose payload is `T`.
pub struct ObjRef<T: ObjectType> {
    ptr: NonNull<ObjectHeader>,
    _marker: PhantomData<T>,
}

// SAFETY: the count is atomic and payloads are `Send + Sync`.
unsafe impl<T: ObjectType> Send for ObjRef<T> {}
// SAFETY: as above.
unsafe impl<T: ObjectType> Sync for ObjRef<T> {}

impl<T: ObjectType> ObjRef<T> {
    /// C++ reads payloads at the header + 16 (a function's call pointer, a module's imports).
    const PAYLOAD_AFTER_HEADER: () = assert!(
        std::mem::offset_of!(ObjectCell<T>, value) - std::mem::offset_of!(ObjectCell<T>, header)
            == std::mem::size_of::<ObjectHeader>()
    );

    /// A cell of `value` with one count, its deleter noted as ours.
    fn cell(value: T) -> ObjectCell<T> {
        #[allow(clippy::let_unit_value)]
        let () = Self::PAYLOAD_AFTER_HEADER;
        native::note(T::TYPE_INDEX, T::DELETER);
        ObjectCell {
            prefix: T::prefix(),
            header: ObjectHeader {
                type_index: T::TYPE_INDEX,
                ref_counter: AtomicI32::new(1),
                deleter: Some(T::DELETER),
            },
            value,
        }
    }

    pub fn new(value: T) -> ObjRef<T> {
        let cell = Box::new(Self::cell(value));
        let cell = Box::into_raw(cell);
        // SAFETY: a field of the allocation just made; the pointer keeps the whole cell's
        // provenance, which the deleter and `Deref` need.
        let header = unsafe { std::ptr::addr_of_mut!((*cell).header) };
        ObjRef { ptr: NonNull::new(header).expect("boxes are never null"), _marker: PhantomData }
    }

    /// The header address: the handle C callers hold.
    pub fn as_ptr(&self) -> *mut ObjectHeader {
        self.ptr.as_ptr()
    }

    /// Gives the reference to C: the count is not decremented.
    pub fn into_raw(self) -> *mut ObjectHeader {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        p
    }

    pub fn into_any(self) -> AnyObject {
        AnyObject { ptr: NonNull::new(self.into_raw()).expect("object pointers are never null") }
    }

    pub fn ptr_eq(a: &ObjRef<T>, b: &ObjRef<T>) -> bool {
        a.ptr == b.ptr
    }

    /// The payload, mutably, when this is the only count of the object (as `Arc::get_mut`): no
    /// one else holds it, so no one can see the change. Crate-only: a C caller may still use a
    /// handle it borrowed from the holder of that count, so only code that is giving its count
    /// up (a deleter taking its children apart) may use it.
    pub(crate) fn get_mut(this: &mut ObjRef<T>) -> Option<&mut T> {
        if this.header().ref_counter.load(Ordering::Acquire) != 1 {
            return None;
        }
        // SAFETY: the one count is ours and we hold it mutably: the cell is an `ObjectCell<T>`
        // (see `Deref`) nobody else reaches.
        Some(unsafe { &mut (*cell_of::<T>(this.ptr.as_ptr())).value })
    }

    pub fn ref_count(&self) -> i32 {
        self.header().ref_counter.load(Ordering::Relaxed)
    }

    fn header(&self) -> &ObjectHeader {
        // SAFETY: the object stays alive while we hold a reference.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: WithTail> ObjRef<T> {
    /// A new object of `value` with `items` inline after it; `value.tail_len()` must be
    /// `items.len()`.
    pub fn new_with_tail(value: T, items: Vec<T::Item>) -> ObjRef<T> {
        assert_eq!(value.tail_len(), items.len(), "a tail of the length the payload records");
        let (layout, offset) = tail_layout::<T>(items.len());
        // SAFETY: a layout of non-zero size (the header); the result is checked, then written
        // whole (the cell, then every element) before anything reads it.
        unsafe {
            let cell = std::alloc::alloc(layout).cast::<ObjectCell<T>>();
            if cell.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            cell.write(Self::cell(value));
            let tail = cell.cast::<u8>().add(offset).cast::<T::Item>();
            for (k, item) in items.into_iter().enumerate() {
                tail.add(k).write(item);
            }
            let header = std::ptr::addr_of_mut!((*cell).header);
            ObjRef { ptr: NonNull::new(header).expect("allocations are never null"), _marker: PhantomData }
        }
    }

    /// The elements inline after the payload.
    pub fn tail(&self) -> &[T::Item] {
        let cell = cell_of::<T>(self.ptr.as_ptr());
        let (_, offset) = tail_layout::<T>(0);
        // SAFETY: the cell was made by `new_with_tail` (the type's deleter says so), with
        // `tail_len` elements at `offset`, alive while we hold a count; the pointer keeps the
        // whole allocation's provenance.
        unsafe {
            let n = (*cell).value.tail_len();
            std::slice::from_raw_parts(cell.cast::<u8>().add(offset).cast::<T::Item>(), n)
        }
    }
}

impl<T: ObjectType> Deref for ObjRef<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the type index was checked when this reference was made, so the cell is an
        // `ObjectCell<T>`, alive while we hold a count.
        unsafe { &(*cell_of::<T>(self.ptr.as_ptr())).value }
    }
}

impl<T: ObjectType> Clone for ObjRef<T> {
    fn clone(&self) -> Self {
        self.header().ref_counter.fetch_add(1, Ordering::Relaxed);
        ObjRef { ptr: self.ptr, _marker: PhantomData }
    }
}

impl<T: ObjectType> Drop for ObjRef<T> {
    fn drop(&mut self) {
        // SAFETY: we own one count of a live object.
        unsafe { release(self.ptr.as_ptr()) }
    }
}

/// Drops one count of the object at `obj`, running its deleter on the last one.
///
/// # Safety
/// `obj` must point at a live object header of which the caller owns one count.
pub unsafe fn release(obj: *mut ObjectHeader) {
    // SAFETY: per the contract, `obj` is live.
    let header = unsafe { &*obj };
    if header.ref_counter.fetch_sub(1, Ordering::Release) == 1 {
        fence(Ordering::Acquire);
        if let Some(deleter) = header.deleter {
            // SAFETY: last count: nobody else can reach the object any more.
            unsafe { deleter(obj) }
        }
    }
}

/// The payload of a borrowed handle, if it is an object of type `T` made by this runtime.
///
/// # Safety
/// `ptr` must be null or a live object header, and stay alive for `'a`.
pub unsafe fn payload_of<'a, T: ObjectType>(ptr: *mut ObjectHeader) -> Option<&'a T> {
    // SAFETY: per the contract.
    let header = unsafe { ptr.as_ref() }?;
    // Each type index belongs to one payload type, and an object made by `ObjRef::<T>::new` carries
    // `T::DELETER`: both must agree before the cell is read as an `ObjectCell<T>`. Objects a host made (a C++ `PackedFuncObj`, a `StringObj` with its own
    // deleter) have the index but not our deleter, and are never mistaken for ours.
    if header.type_index != T::TYPE_INDEX || header.deleter.map(|d| d as usize) != Some(T::DELETER as usize) {
        return None;
    }
    // SAFETY: see above.
    Some(unsafe { &(*cell_of::<T>(ptr)).value })
}

/// A type-erased owning reference.
pub struct AnyObject {
    ptr: NonNull<ObjectHeader>,
}

// SAFETY: see `ObjRef`.
unsafe impl Send for AnyObject {}
// SAFETY: see `ObjRef`.
unsafe impl Sync for AnyObject {}

impl AnyObject {
    /// Takes over one count of a raw handle.
    ///
    /// # Safety
    /// `ptr` must be null or a live object header of which the caller gives up one count.
    pub unsafe fn from_raw(ptr: *mut ObjectHeader) -> Option<AnyObject> {
        NonNull::new(ptr).map(|ptr| AnyObject { ptr })
    }

    /// Takes a new count on a borrowed handle.
    ///
    /// # Safety
    /// `ptr` must be null or a live object header.
    pub unsafe fn retain_raw(ptr: *mut ObjectHeader) -> Option<AnyObject> {
        let obj = NonNull::new(ptr)?;
        // SAFETY: per the contract the header is live.
        unsafe { obj.as_ref() }.ref_counter.fetch_add(1, Ordering::Relaxed);
        Some(AnyObject { ptr: obj })
    }

    /// Takes a new count on a borrowed handle unless its count already reached zero (the object is
    /// being destroyed).
    ///
    /// # Safety
    /// `ptr` must be null or an object header whose memory is still allocated.
    pub unsafe fn try_retain_raw(ptr: *mut ObjectHeader) -> Option<AnyObject> {
        let obj = NonNull::new(ptr)?;
        // SAFETY: per the contract the header is readable.
        let count = &unsafe { obj.as_ref() }.ref_counter;
        let mut c = count.load(Ordering::Relaxed);
        loop {
            if c <= 0 {
                return None;
            }
            match count.compare_exchange_weak(c, c + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(AnyObject { ptr: obj }),
                Err(now) => c = now,
            }
        }
    }

    /// The key of the object's type, for messages.
    pub fn type_key(&self) -> String {
        type_key_of(self.type_index())
    }

    pub fn type_index(&self) -> u32 {
        // SAFETY: alive while we hold a count.
        unsafe { self.ptr.as_ref() }.type_index
    }

    pub fn as_ptr(&self) -> *mut ObjectHeader {
        self.ptr.as_ptr()
    }

    pub fn into_raw(self) -> *mut ObjectHeader {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        p
    }

    pub fn downcast<T: ObjectType>(self) -> std::result::Result<ObjRef<T>, AnyObject> {
        // SAFETY: alive while we hold a count.
        if unsafe { payload_of::<T>(self.ptr.as_ptr()) }.is_some() {
            Ok(ObjRef { ptr: NonNull::new(self.into_raw()).expect("non-null"), _marker: PhantomData })
        } else {
            Err(self)
        }
    }

    pub fn downcast_ref<T: ObjectType>(&self) -> Option<ObjRef<T>> {
        self.clone().downcast().ok()
    }

    /// The object's payload as a `T`, borrowed: no count taken (where `downcast_ref` takes one).
    pub fn payload<T: ObjectType>(&self) -> Option<&T> {
        // SAFETY: alive while we hold a count, and so for the borrow of `self`.
        unsafe { payload_of::<T>(self.ptr.as_ptr()) }
    }

    pub fn as_c_handle(&self) -> *mut std::ffi::c_void {
        self.ptr.as_ptr().cast()
    }
}

impl Clone for AnyObject {
    fn clone(&self) -> Self {
        // SAFETY: alive while we hold a count.
        unsafe { self.ptr.as_ref() }.ref_counter.fetch_add(1, Ordering::Relaxed);
        AnyObject { ptr: self.ptr }
    }
}

impl Drop for AnyObject {
    fn drop(&mut self) {
        // SAFETY: we own one count.
        unsafe { release(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for AnyObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Object({}, {:p})", type_key_of(self.type_index()), self.ptr)
    }
}

impl<T: ObjectType> std::fmt::Debug for ObjRef<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjRef({}, {:p})", type_key_of(T::TYPE_INDEX), self.ptr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    struct Probe(Arc<AtomicUsize>);
    object_type!(Probe, 100);
    impl Drop for Probe {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn counts_and_drops_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let a = ObjRef::new(Probe(drops.clone()));
        let b = a.clone();
        assert_eq!(a.ref_count(), 2);
        let any = b.into_any();
        assert_eq!(any.type_index(), 100);
        let back: ObjRef<Probe> = any.downcast().unwrap();
        drop(a);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(back);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }
}
