//! The Relay VM's bytecode file (what `exe.save()` returns, and what a `VMExecutable` entry of a
//! module blob holds), read and written in each of its three generations.
//!
//! A dmlc binary stream, little-endian: the magic `0xD225DE2F4214151D` and the compiler's version
//! string; the virtual devices (0.9+: `Device`s, from 0.14 each with a memory scope string, then
//! the host device's index as an `i32`); the global function names in index order; the constants
//! (a `u64` count, then per constant a `u32` tag from 0.9 on, 0 for a tensor in the params record
//! format, 1 for a late-bound one's name; then each constant's device, a type in 0.8, an index
//! after); the primitive (kernel) names and a map of their string attributes; the functions, each
//! a string triple (name, register count, instruction count), its parameter names and devices,
//! then its instructions as `i64` vectors `[hash, opcode, fields...]`.
//!
//! Upstream refuses any version string but its own compiler's; this reader takes every string of
//! a generation it knows, and for a string it does not know, the one generation that reads the
//! whole file cleanly (every hash right, nothing left over), or an error naming the version.

#![forbid(unsafe_code)]

use super::code::{instruction_hash, Bounds, DeviceMap, Function, Instr, Layout};
use crate::dlpack::{kDLCPU, DLDevice};
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::params;
use crate::stream::{Reader, Writer};
use crate::tensor::NDArray;

pub const MAGIC: u64 = 0xD225_DE2F_4214_151D;

/// A device the code names by index, and the memory scope of what is allocated there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualDevice {
    pub device: DLDevice,
    pub scope: String,
}

/// A constant of the executable: a tensor (on the host), or the name of a late-bound one that
/// must be loaded before the code runs.
#[derive(Clone)]
pub enum Constant {
    Tensor(ObjRef<NDArray>),
    LateBound(String),
}

/// Everything a bytecode file holds.
pub struct Image {
    pub version: String,
    pub layout: Layout,
    pub devices: Vec<VirtualDevice>,
    pub host: usize,
    pub globals: Vec<String>,
    pub constants: Vec<Constant>,
    pub const_devices: Vec<usize>,
    pub primitives: Vec<String>,
    /// Per primitive index (those that have any): its string attributes (layouts, a hash).
    pub primitive_attrs: Vec<(u64, Vec<(String, String)>)>,
    pub functions: Vec<Function>,
}

/// A function as read, before its instructions are typed.
struct RawFunction {
    name: String,
    registers: usize,
    params: Vec<String>,
    param_devices: Vec<i64>,
    code: Vec<(i64, Vec<i64>)>,
}

/// The devices of a 0.8 file (which names them by type): the host's CPU first, then every other
/// device type the file names.
struct ByType(Vec<i32>);

impl DeviceMap for ByType {
    fn index_of_type(&self, device_type: i64) -> Result<usize> {
        self.0
            .iter()
            .position(|&t| i64::from(t) == device_type)
            .ok_or_else(|| Error::value(format!("device type {device_type} not among the file's")))
    }

    fn type_of_index(&self, index: usize) -> i64 {
        i64::from(self.0[index])
    }
}

/// Device indexes as they are (0.9+).
struct ByIndex;

impl DeviceMap for ByIndex {
    fn index_of_type(&self, device_type: i64) -> Result<usize> {
        usize::try_from(device_type).map_err(|_| Error::value(format!("device index {device_type} is negative")))
    }

    fn type_of_index(&self, index: usize) -> i64 {
        index as i64
    }
}

fn i64s(r: &mut Reader<'_>) -> Result<Vec<i64>> {
    let n = r.count(8)?;
    (0..n).map(|_| r.i64()).collect()
}

fn device(r: &mut Reader<'_>) -> Result<DLDevice> {
    Ok(DLDevice { device_type: r.i32()?, device_id: r.i32()? })
}

/// Reads a bytecode file.
pub fn read(bytes: &[u8]) -> Result<Image> {
    let mut r = Reader::new(bytes, "VM bytecode");
    let magic = r.u64()?;
    if magic != MAGIC {
        return Err(Error::value(format!(
            "not a Relay VM executable: magic {magic:#x}, expected {MAGIC:#x} (the bytes of exe.save(), or a \
             VMExecutable export_library)"
        )));
    }
    let version = r.string()?.to_string();
    let after_header = r.pos();
    if let Some(layout) = Layout::of_version(&version) {
        return read_body(bytes, after_header, layout, &version)
            .map_err(|e| e.context(format!("a VM executable of TVM {version} ({} bytecode)", layout.describe())));
    }
    // A version this runtime does not know: the generation that reads the whole file, if one does.
    let mut tried = Vec::new();
    for layout in [Layout::V014, Layout::V09, Layout::V08] {
        match read_body(bytes, after_header, layout, &version) {
            Ok(image) => return Ok(image),
            Err(e) => tried.push(format!("as {}: {e}", layout.describe())),
        }
    }
    Err(Error::value(format!(
        "a VM executable of TVM '{version}', a version whose bytecode this runtime does not know (it reads those \
         of TVM 0.8 to 0.19); it reads as none of them ({})",
        tried.join("; ")
    )))
}

fn read_body(bytes: &[u8], start: usize, layout: Layout, version: &str) -> Result<Image> {
    let mut r = Reader::new(bytes, "VM bytecode");
    r.bytes(start)?;
    let mut devices = Vec::new();
    let mut host = 0;
    if layout != Layout::V08 {
        let n = r.count(8)?;
        for _ in 0..n {
            let device = device(&mut r)?;
            let scope = if layout == Layout::V014 { r.string()?.to_string() } else { String::new() };
            devices.push(VirtualDevice { device, scope });
        }
        let h = r.i32()?;
        host = usize::try_from(h)
            .ok()
            .filter(|&h| h < devices.len())
            .ok_or_else(|| r.error(format!("host device index {h} of {} devices", devices.len())))?;
    }
    let globals: Vec<String> = r.strings()?.into_iter().map(str::to_string).collect();
    let count = r.count(8)?;
    let mut constants = Vec::with_capacity(count);
    for i in 0..count {
        let tag = if layout == Layout::V08 { 0 } else { r.u32()? };
        constants.push(match tag {
            0 => {
                let rec = params::read_record(&mut r).map_err(|e| e.context(format!("constant {i}")))?;
                Constant::Tensor(rec.to_ndarray()?)
            }
            1 => Constant::LateBound(r.string()?.to_string()),
            other => return Err(r.error(format!("constant {i}: tag {other} (0 or 1 expected)"))),
        });
    }
    let const_devices_raw = i64s(&mut r)?;
    if const_devices_raw.len() != count {
        return Err(r.error(format!("{} constant devices for {count} constants", const_devices_raw.len())));
    }
    let primitives: Vec<String> = r.strings()?.into_iter().map(str::to_string).collect();
    let n_attrs = r.count(16)?;
    let mut primitive_attrs = Vec::with_capacity(n_attrs);
    for _ in 0..n_attrs {
        let index = r.u64()?;
        let n = r.count(16)?;
        let attrs =
            (0..n).map(|_| Ok((r.string()?.to_string(), r.string()?.to_string()))).collect::<Result<Vec<_>>>()?;
        primitive_attrs.push((index, attrs));
    }
    let n_funcs = r.count(8)?;
    let mut raw = Vec::with_capacity(n_funcs);
    for _ in 0..n_funcs {
        raw.push(read_function(&mut r)?);
    }
    if !r.is_at_end() {
        return Err(r.error(format!("{} bytes after the last function", r.remaining())));
    }
    // Devices: 0.8 names them by type in the constants, the parameters and the instructions.
    let map: Box<dyn DeviceMap> = if layout == Layout::V08 {
        let mut types = vec![kDLCPU];
        let mut note = |t: i64| {
            if let Ok(t) = i32::try_from(t) {
                if !types.contains(&t) {
                    types.push(t);
                }
            }
        };
        const_devices_raw.iter().for_each(|&t| note(t));
        for f in &raw {
            f.param_devices.iter().for_each(|&t| note(t));
            for (opcode, fields) in &f.code {
                match *opcode {
                    super::code::op::ALLOC_STORAGE if fields.len() > 5 => note(fields[5]),
                    super::code::op::DEVICE_COPY if fields.len() > 2 => {
                        note(fields[1]);
                        note(fields[2]);
                    }
                    _ => {}
                }
            }
        }
        devices = types
            .iter()
            .map(|&t| VirtualDevice { device: DLDevice { device_type: t, device_id: 0 }, scope: String::new() })
            .collect();
        Box::new(ByType(types))
    } else {
        Box::new(ByIndex)
    };
    let const_devices = const_devices_raw.iter().map(|&d| map.index_of_type(d)).collect::<Result<Vec<_>>>()?;
    if let Some(d) = const_devices.iter().find(|&&d| d >= devices.len()) {
        return Err(Error::value(format!("a constant on device {d} of {}", devices.len())));
    }
    let mut functions: Vec<Option<Function>> = vec![None; globals.len()];
    for f in raw {
        let at = globals
            .iter()
            .position(|g| *g == f.name)
            .ok_or_else(|| Error::value(format!("function '{}' is not among the globals", f.name)))?;
        if functions[at].is_some() {
            return Err(Error::value(format!("function '{}' defined twice", f.name)));
        }
        let code = f
            .code
            .iter()
            .enumerate()
            .map(|(pc, (opcode, fields))| {
                Instr::decode(layout, *opcode, fields, &*map)
                    .map_err(|e| e.context(format!("function '{}', instruction {pc}", f.name)))
            })
            .collect::<Result<Vec<_>>>()?;
        let param_devices = f.param_devices.iter().map(|&d| map.index_of_type(d)).collect::<Result<Vec<_>>>()?;
        functions[at] = Some(Function { name: f.name, params: f.params, param_devices, registers: f.registers, code });
    }
    let functions = functions
        .into_iter()
        .enumerate()
        .map(|(i, f)| f.ok_or_else(|| Error::value(format!("global '{}' has no function", globals[i]))))
        .collect::<Result<Vec<_>>>()?;
    let bounds =
        Bounds { functions: functions.len(), constants: count, primitives: primitives.len(), devices: devices.len() };
    for f in &functions {
        f.validate(&bounds)?;
    }
    Ok(Image {
        version: version.to_string(),
        layout,
        devices,
        host,
        globals,
        constants,
        const_devices,
        primitives,
        primitive_attrs,
        functions,
    })
}

fn read_function(r: &mut Reader<'_>) -> Result<RawFunction> {
    let info = r.strings()?;
    let [name, registers, count] = info.as_slice() else {
        return Err(r.error(format!("a function header of {} strings, 3 expected", info.len())));
    };
    let number = |s: &str, what: &str| {
        s.trim().parse::<usize>().map_err(|_| r.error(format!("function '{name}': {what} '{s}' is not a count")))
    };
    let registers = number(registers, "register count")?;
    let count = number(count, "instruction count")?;
    let params = r.strings()?.into_iter().map(str::to_string).collect();
    let param_devices = i64s(r)?;
    // Each instruction is at least a count, a hash and an opcode.
    if count.saturating_mul(24) > r.remaining() {
        return Err(r.error(format!("function '{name}': {count} instructions in {} bytes", r.remaining())));
    }
    let mut code = Vec::with_capacity(count);
    for pc in 0..count {
        let v = i64s(r)?;
        let [hash, opcode, fields @ ..] = v.as_slice() else {
            return Err(r.error(format!("function '{name}', instruction {pc}: {} values", v.len())));
        };
        if instruction_hash(*opcode, fields) != *hash {
            return Err(
                r.error(format!("function '{name}', instruction {pc} (opcode {opcode}): its hash does not match"))
            );
        }
        code.push((*opcode, fields.to_vec()));
    }
    Ok(RawFunction { name: name.to_string(), registers, params, param_devices, code })
}

/// Writes `image` in its own generation, as its compiler would (what `save` returns).
pub fn write(image: &Image) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(MAGIC);
    w.string(&image.version);
    let types = ByType(image.devices.iter().map(|d| d.device.device_type).collect());
    let map: &dyn DeviceMap = if image.layout == Layout::V08 { &types } else { &ByIndex };
    if image.layout != Layout::V08 {
        w.u64(image.devices.len() as u64);
        for d in &image.devices {
            w.i32(d.device.device_type);
            w.i32(d.device.device_id);
            if image.layout == Layout::V014 {
                w.string(&d.scope);
            }
        }
        w.i32(image.host as i32);
    }
    w.u64(image.globals.len() as u64);
    image.globals.iter().for_each(|g| w.string(g));
    w.u64(image.constants.len() as u64);
    for c in &image.constants {
        match c {
            Constant::Tensor(t) => {
                if image.layout != Layout::V08 {
                    w.u32(0);
                }
                params::write_record(&mut w, t);
            }
            Constant::LateBound(name) => {
                w.u32(1);
                w.string(name);
            }
        }
    }
    w.u64(image.const_devices.len() as u64);
    image.const_devices.iter().for_each(|&d| w.i64(map.type_of_index(d)));
    w.u64(image.primitives.len() as u64);
    image.primitives.iter().for_each(|p| w.string(p));
    w.u64(image.primitive_attrs.len() as u64);
    for (index, attrs) in &image.primitive_attrs {
        w.u64(*index);
        w.u64(attrs.len() as u64);
        for (k, v) in attrs {
            w.string(k);
            w.string(v);
        }
    }
    w.u64(image.functions.len() as u64);
    for f in &image.functions {
        w.u64(3);
        w.string(&f.name);
        w.string(&f.registers.to_string());
        w.string(&f.code.len().to_string());
        w.u64(f.params.len() as u64);
        f.params.iter().for_each(|p| w.string(p));
        w.u64(f.param_devices.len() as u64);
        f.param_devices.iter().for_each(|&d| w.i64(map.type_of_index(d)));
        for ins in &f.code {
            let (opcode, fields) = ins.encode(image.layout, map);
            w.u64(fields.len() as u64 + 2);
            w.i64(instruction_hash(opcode, &fields));
            w.i64(opcode);
            fields.iter().for_each(|&v| w.i64(v));
        }
    }
    w.buf
}
