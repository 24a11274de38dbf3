//! The CPU as a device: host memory, plain copies, nothing queued.

use super::{attr, Attr, DeviceApi, Place};
use crate::error::{Error, Result};
use std::ffi::c_void;

pub struct Cpu;

use crate::host_memory::ALIGNMENT;

impl DeviceApi for Cpu {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn count(&self) -> Result<usize> {
        Ok(1)
    }

    fn attr(&self, _id: i32, kind: i32) -> Result<Option<Attr>> {
        // Upstream's CPU answers existence and leaves the rest unset.
        Ok((kind == attr::EXIST).then_some(Attr::Int(1)))
    }

    fn set_device(&self, _id: i32) -> Result<()> {
        Ok(())
    }

    fn alloc(&self, _id: i32, nbytes: usize, alignment: usize) -> Result<*mut c_void> {
        let align =
            alignment.max(ALIGNMENT).checked_next_power_of_two().ok_or_else(|| Error::value("alignment too large"))?;
        let mut p = std::ptr::null_mut();
        // SAFETY: posix_memalign with a power-of-two alignment that is a multiple of the pointer size.
        let rc = unsafe { libc::posix_memalign(&mut p, align, nbytes.max(1)) };
        if rc != 0 {
            return Err(Error::tvm(format!("out of memory allocating {nbytes} bytes")));
        }
        // SAFETY: `nbytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, nbytes) };
        Ok(p)
    }

    unsafe fn free(&self, _id: i32, data: *mut c_void) -> Result<()> {
        // SAFETY: memory from `alloc` (posix_memalign), or null; the caller's promise.
        unsafe { libc::free(data) };
        Ok(())
    }

    fn region_alignment(&self, _id: i32) -> Result<usize> {
        Ok(ALIGNMENT)
    }

    unsafe fn region(&self, _id: i32, data: *mut c_void, offset: usize, _len: usize) -> Result<*mut c_void> {
        Ok(data.cast::<u8>().wrapping_add(offset).cast())
    }

    unsafe fn copy(&self, from: Place, to: Place, nbytes: usize) -> Result<()> {
        if nbytes == 0 {
            return Ok(());
        }
        // SAFETY: both places hold `nbytes` from their offsets (the caller's promise); `copy`
        // allows overlap, as a host may copy a tensor onto a view of itself.
        unsafe {
            std::ptr::copy(
                from.data.cast::<u8>().add(from.offset).cast_const(),
                to.data.cast::<u8>().add(to.offset),
                nbytes,
            )
        };
        Ok(())
    }

    fn sync(&self, _id: i32) -> Result<()> {
        Ok(())
    }

    /// Nothing is ever queued on the host: any stream is done (upstream's CPU ignores the handle).
    fn sync_stream(&self, _id: i32, _stream: *mut c_void) -> Result<()> {
        Ok(())
    }

    fn alloc_workspace(&self, _id: i32, nbytes: usize) -> Result<*mut c_void> {
        crate::backend::workspace::alloc(nbytes as u64).map(|p| p.cast())
    }

    fn free_workspace(&self, _id: i32, data: *mut c_void) -> Result<()> {
        crate::backend::workspace::free(data.cast())
    }
}
