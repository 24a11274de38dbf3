//! Textures on OpenCL: a tensor in a texture scope is a 2-D RGBA image (upstream's format: the
//! channel type follows the dtype), its descriptor's layout naming the scope, so that copies know
//! how the tensor's shape folds into pixels. Copies between images, buffers and the host move the
//! tensor's own region, from the image's corner: an image may be larger than the tensor (one image
//! serves entries of several shapes, as upstream's storage pools do).
//!
//! Also the texture scratch of kernels (`device_api.opencl.alloc_nd` / `free_nd`): images kept
//! per thread and device and reused, as upstream's `TexturePool`.

use super::{descriptor_with, state, streams, sys, Descriptor, OpenCl, State};
use crate::device::texture::Texture;
use crate::device::{DeviceApi, Place};
use crate::dlpack::DLDataType;
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::ffi::c_void;
use sys::{check, ClUint, Mem};

/// The image channel type of a dtype, as upstream's (one lane only).
fn channel_type(dtype: DLDataType) -> Result<ClUint> {
    use crate::dlpack::{kDLFloat, kDLInt, kDLUInt};
    let t = match (dtype.code, dtype.bits, dtype.lanes) {
        (kDLFloat, 32, 1) => sys::CL_FLOAT,
        (kDLFloat, 16, 1) => sys::CL_HALF_FLOAT,
        (kDLInt, 8, 1) => sys::CL_SIGNED_INT8,
        (kDLInt, 16, 1) => sys::CL_SIGNED_INT16,
        (kDLInt, 32, 1) => sys::CL_SIGNED_INT32,
        (kDLUInt, 8, 1) => sys::CL_UNSIGNED_INT8,
        (kDLUInt, 16, 1) => sys::CL_UNSIGNED_INT16,
        (kDLUInt, 32, 1) => sys::CL_UNSIGNED_INT32,
        _ => {
            return Err(Error::value(format!(
            "no OpenCL image format holds {dtype}: textures take float16/32, int8/16/32 or uint8/16/32 with one lane"
        )))
        }
    };
    Ok(t)
}

impl State {
    /// A zeroed `width` x `height` RGBA image of `dtype` on device `id`.
    fn create_image(&self, id: i32, width: usize, height: usize, dtype: DLDataType) -> Result<Mem> {
        let data_type = channel_type(dtype)?;
        if self.device_info::<ClUint>(id, sys::CL_DEVICE_IMAGE_SUPPORT)? == 0 {
            return Err(Error::value(format!(
                "opencl({id}) has no image support: models built for texture memory (TVM's Adreno target) need it"
            )));
        }
        let max = (
            self.device_info::<usize>(id, sys::CL_DEVICE_IMAGE2D_MAX_WIDTH)?,
            self.device_info::<usize>(id, sys::CL_DEVICE_IMAGE2D_MAX_HEIGHT)?,
        );
        if width > max.0 || height > max.1 {
            return Err(Error::value(format!(
                "a {width} x {height} image exceeds opencl({id})'s largest 2-D image, {} x {}",
                max.0, max.1
            )));
        }
        let (context, _) = self.context_and_device(id)?;
        let format = sys::ImageFormat { order: sys::CL_RGBA, data_type };
        let desc = sys::ImageDesc {
            image_type: sys::CL_MEM_OBJECT_IMAGE2D,
            width,
            height,
            depth: 0,
            array_size: 0,
            row_pitch: 0,
            slice_pitch: 0,
            mip_levels: 0,
            samples: 0,
            buffer: std::ptr::null_mut(),
        };
        let mut rc = 0;
        // SAFETY: a 2-D image with no host pointer, from a format and description that live
        // through the call.
        let mem = unsafe {
            (self.api.clCreateImage)(context, sys::CL_MEM_READ_WRITE, &format, &desc, std::ptr::null_mut(), &mut rc)
        };
        check(rc, "clCreateImage").map_err(|e| e.context(format!("a {width} x {height} image on opencl({id})")))?;
        // Zeroed as every allocation here (the fill colour is 16 zero bytes whatever the type).
        let zero = [0u8; 16];
        let queue = self.queue(id)?;
        // SAFETY: the image just made; origin and region inside it; the colour is read at enqueue.
        let rc = unsafe {
            (self.api.clEnqueueFillImage)(
                *queue,
                mem,
                zero.as_ptr().cast(),
                [0usize; 3].as_ptr(),
                [width, height, 1].as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        if let Err(e) = check(rc, "clEnqueueFillImage").and_then(|_| self.settle(&queue)) {
            // SAFETY: made above, not handed out.
            unsafe { (self.api.clReleaseMemObject)(mem) };
            return Err(e);
        }
        Ok(mem)
    }

    fn image_info(&self, mem: Mem, param: ClUint) -> Result<usize> {
        let mut v = 0usize;
        // SAFETY: a size_t query of a live image.
        let rc = unsafe {
            (self.api.clGetImageInfo)(
                mem,
                param,
                std::mem::size_of::<usize>(),
                (&mut v as *mut usize).cast(),
                std::ptr::null_mut(),
            )
        };
        check(rc, "clGetImageInfo")?;
        Ok(v)
    }
}

/// An image for a tensor of `shape` in `texture` on device `id`: its descriptor's address.
pub(super) fn alloc(id: i32, texture: Texture, shape: &[i64], dtype: DLDataType) -> Result<*mut c_void> {
    let e = texture.extent(shape)?;
    let mem = state()?.create_image(id, e.width, e.height, dtype)?;
    Ok(descriptor_with(mem, texture.layout()))
}

/// The image and texture of an OpenCL tensor's data, or `None` for a buffer.
///
/// # Safety
/// `data` is null or a live descriptor.
pub(super) unsafe fn image_of(data: *mut c_void) -> Option<(Mem, Texture)> {
    if data.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    let d = unsafe { &*data.cast::<Descriptor>() };
    Texture::of_layout(d.layout).map(|t| (d.buffer, t))
}

/// The region of the image `mem` (in `texture`) that `place`'s tensor occupies: its shape's
/// folding, or the whole image for a place without a shape. It must lie inside the image and hold
/// exactly `nbytes`.
fn region(s: &State, mem: Mem, texture: Texture, place: &Place, nbytes: usize) -> Result<[usize; 3]> {
    let image = (s.image_info(mem, sys::CL_IMAGE_WIDTH)?, s.image_info(mem, sys::CL_IMAGE_HEIGHT)?);
    let pixel = s.image_info(mem, sys::CL_IMAGE_ELEMENT_SIZE)?;
    let (width, height) = match &place.shape {
        Some(shape) => {
            let e = texture.extent(shape.as_slice())?;
            if e.width > image.0 || e.height > image.1 {
                return Err(Error::value(format!(
                    "a tensor of shape {:?} in '{}' ({} x {} pixels) does not fit its {} x {} image",
                    shape.as_slice(),
                    texture.scope(),
                    e.width,
                    e.height,
                    image.0,
                    image.1
                )));
            }
            (e.width, e.height)
        }
        None => image,
    };
    if width * height * pixel != nbytes {
        return Err(Error::value(format!(
            "cannot copy {nbytes} bytes to or from {width} x {height} pixels of {pixel} bytes in '{}'{}",
            texture.scope(),
            if place.shape.is_none() { " (a whole image: the tensor's shape was not given)" } else { "" }
        )));
    }
    if place.offset != 0 {
        return Err(Error::value("an image is copied from its corner: a byte offset into a texture is refused"));
    }
    Ok([width, height, 1])
}

/// Copies `nbytes` where at least one side is an image (the other the host, a buffer or an image);
/// blocking towards the host as buffer copies are.
///
/// # Safety
/// As `DeviceApi::copy`.
pub(super) unsafe fn copy(from: Place, to: Place, nbytes: usize) -> Result<()> {
    let s = state()?;
    let host = |p: &Place| crate::device::is_host(p.device);
    // SAFETY: device sides are live descriptors (the caller's promise).
    let (src, dst) = unsafe {
        (if host(&from) { None } else { image_of(from.data) }, if host(&to) { None } else { image_of(to.data) })
    };
    let origin = [0usize; 3];
    let none = (0, std::ptr::null(), std::ptr::null_mut());
    match (host(&from), host(&to)) {
        (true, false) => {
            let (image, texture) = dst.expect("an image side");
            let r = region(s, image, texture, &to, nbytes)?;
            let q = s.queue(to.device.device_id)?;
            // SAFETY: the host side holds `nbytes` (the caller's promise) = the region's bytes,
            // packed; blocking, so the host memory may change once it returns.
            let rc = unsafe {
                let p = from.data.cast::<u8>().add(from.offset).cast();
                (s.api.clEnqueueWriteImage)(*q, image, 1, origin.as_ptr(), r.as_ptr(), 0, 0, p, none.0, none.1, none.2)
            };
            check(rc, "clEnqueueWriteImage")?;
            s.settle(&q)
        }
        (false, true) => {
            let (image, texture) = src.expect("an image side");
            let r = region(s, image, texture, &from, nbytes)?;
            let q = s.queue(from.device.device_id)?;
            // SAFETY: as above, reading; blocking, so queued kernels finish first (in order).
            let rc = unsafe {
                let p = to.data.cast::<u8>().add(to.offset).cast();
                (s.api.clEnqueueReadImage)(*q, image, 1, origin.as_ptr(), r.as_ptr(), 0, 0, p, none.0, none.1, none.2)
            };
            check(rc, "clEnqueueReadImage")
        }
        (false, false) => {
            let q = s.copy_queue(from.device.device_id, to.device.device_id)?;
            // SAFETY: live memory objects of one context (the caller's promise); each region is
            // checked to lie inside its image and to hold `nbytes`.
            let rc = unsafe {
                // SAFETY (descriptor reads): the caller's promise.
                let (fb, tb) = (super::buffer_of(from.data)?, super::buffer_of(to.data)?);
                match (src, dst) {
                    (Some((i, t)), Some((j, u))) => {
                        let (r, r2) = (region(s, i, t, &from, nbytes)?, region(s, j, u, &to, nbytes)?);
                        if r != r2 {
                            return Err(Error::value(format!("image regions differ: {r:?} and {r2:?}")));
                        }
                        (s.api.clEnqueueCopyImage)(
                            *q,
                            fb,
                            tb,
                            origin.as_ptr(),
                            origin.as_ptr(),
                            r.as_ptr(),
                            0,
                            none.1,
                            none.2,
                        )
                    }
                    (Some((i, t)), None) => {
                        let r = region(s, i, t, &from, nbytes)?;
                        (s.api.clEnqueueCopyImageToBuffer)(
                            *q,
                            fb,
                            tb,
                            origin.as_ptr(),
                            r.as_ptr(),
                            to.offset,
                            0,
                            none.1,
                            none.2,
                        )
                    }
                    (None, Some((j, u))) => {
                        let r = region(s, j, u, &to, nbytes)?;
                        (s.api.clEnqueueCopyBufferToImage)(
                            *q,
                            fb,
                            tb,
                            from.offset,
                            origin.as_ptr(),
                            r.as_ptr(),
                            0,
                            none.1,
                            none.2,
                        )
                    }
                    (None, None) => unreachable!("an image side"),
                }
            };
            check(rc, "clEnqueueCopy (image)")?;
            s.settle(&q)
        }
        (true, true) => Err(Error::internal("Expect copy from/to OpenCL or between OpenCL")),
    }
}

/// One image of a thread's texture scratch.
struct Scratch {
    handle: usize,
    device: i32,
    width: usize,
    height: usize,
    dtype: (u8, u8),
    in_use: bool,
}

/// Images a kernel asks for by size (`alloc_nd`): kept per thread, as upstream's (kernels of one
/// thread ask for them in a nested order), and released when the thread ends.
#[derive(Default)]
struct TexturePool(Vec<Scratch>);

/// Scratch images more than this many times larger (or smaller) than a request are not reused
/// for it, as upstream's pool (a small tensor in a huge image reads slowly on Adreno).
const MAX_RATIO: usize = 5;

impl TexturePool {
    fn alloc(&mut self, id: i32, width: usize, height: usize, dtype: DLDataType) -> Result<*mut c_void> {
        let key = (dtype.code, dtype.bits);
        let near = |a: usize, b: usize| a.max(b) / a.min(b).max(1) <= MAX_RATIO;
        // The free image needing the least growth, then the smallest (wasting the least).
        let best = self
            .0
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.in_use && s.device == id && s.dtype == key)
            .filter(|(_, s)| near(s.width, width) && near(s.height, height))
            .min_by_key(|(_, s)| {
                let grown = s.width.max(width) * s.height.max(height);
                (grown - s.width * s.height, grown)
            })
            .map(|(i, _)| i);
        if let Some(i) = best {
            let s = &mut self.0[i];
            if s.width >= width && s.height >= height {
                s.in_use = true;
                return Ok(s.handle as *mut c_void);
            }
            // Grow it: a larger image replaces it.
            let (w, h) = (s.width.max(width), s.height.max(height));
            let handle = alloc(id, Texture::Activation, &[h as i64, w as i64, 4], dtype)? as usize;
            let old =
                std::mem::replace(s, Scratch { handle, device: id, width: w, height: h, dtype: key, in_use: true });
            // SAFETY: a scratch image of ours, handed out to nobody (not in use).
            unsafe { OpenCl.free(id, old.handle as *mut c_void) }?;
            return Ok(handle as *mut c_void);
        }
        let handle = alloc(id, Texture::Activation, &[height as i64, width as i64, 4], dtype)? as usize;
        self.0.push(Scratch { handle, device: id, width, height, dtype: key, in_use: true });
        Ok(handle as *mut c_void)
    }

    fn free(&mut self, id: i32, data: *mut c_void) -> Result<()> {
        let s = self
            .0
            .iter_mut()
            .find(|s| s.in_use && s.device == id && s.handle == data as usize)
            .ok_or_else(|| Error::value("Attempt to free a texture that has not been allocated"))?;
        s.in_use = false;
        Ok(())
    }
}

impl TexturePool {
    fn release_idle(&mut self) {
        self.0.retain(|s| {
            if !s.in_use {
                // SAFETY: an image of this pool handed out to nobody (not in use), no longer listed.
                let _ = unsafe { OpenCl.free(s.device, s.handle as *mut c_void) };
            }
            s.in_use
        });
    }
}

/// Releases the calling thread's idle texture scratch (the last executor going: the thread that
/// drops it gives back what its kernels kept; other threads' scratch goes when they end).
pub(super) fn release_idle_scratch() {
    let _ = SCRATCH.try_with(|p| p.borrow_mut().release_idle());
}

impl Drop for TexturePool {
    fn drop(&mut self) {
        for s in self.0.drain(..) {
            // SAFETY: an image of this pool, freed once (the thread that used it is ending).
            let _ = unsafe { OpenCl.free(s.device, s.handle as *mut c_void) };
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<TexturePool> = RefCell::new(TexturePool::default());
}

/// `device_api.opencl.alloc_nd`: a scratch image of `width` x `height` pixels for a kernel of the
/// calling thread.
pub fn alloc_scratch(id: i32, width: usize, height: usize, dtype: DLDataType) -> Result<*mut c_void> {
    state()?.device(id)?;
    if width == 0 || height == 0 {
        return Err(Error::value(format!("an empty texture ({width} x {height}) was asked for")));
    }
    SCRATCH.with(|p| p.borrow_mut().alloc(id, width, height, dtype))
}

/// `device_api.opencl.free_nd`: gives a scratch image back for reuse. Queued kernels keep using it
/// in order: the next user is a kernel of the same thread's queue (streams aside: a scratch image
/// is reused on any of the thread's streams, as upstream's, whose streams are all one queue).
pub fn free_scratch(id: i32, data: *mut c_void) -> Result<()> {
    if streams::any() {
        // Another stream of this thread may take it next: let what used it finish.
        OpenCl.sync(id)?;
    }
    SCRATCH.with(|p| p.borrow_mut().free(id, data))
}
