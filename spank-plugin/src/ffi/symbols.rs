//! The symbols Slurm's plugin loader looks up (src/common/plugin.c) and the
//! `--syndeo` option table, which Slurm keeps a pointer to.
use std::ffi::c_char;

use slurm_sys as sys;

#[no_mangle]
#[used]
pub static plugin_name: [u8; 7] = *b"syndeo\0";
#[no_mangle]
#[used]
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
#[used]
pub static plugin_version: u32 = sys::BUILT_SLURM_VERSION;

/// `spank_option_register` keeps a pointer to the option, so it must live
/// for the whole process: a static, never written.
pub(super) struct StaticOption(sys::spank_option);
// SAFETY: the option table is immutable after initialisation and only
// read by Slurm on the thread that loaded the plugin.
unsafe impl Sync for StaticOption {}

pub(super) static SYNDEO_OPTION: StaticOption = StaticOption(sys::spank_option {
    name: c"syndeo".as_ptr() as *mut c_char,
    arginfo: c"IMAGE".as_ptr() as *mut c_char,
    usage: c"Run a Ray cluster on the job's nodes in container IMAGE (absolute path; omit =IMAGE for the site default). `srun --syndeo CMD` runs CMD inside the image."
        .as_ptr() as *mut c_char,
    has_arg: 2,
    val: 0,
    cb: Some(super::option_callback),
});

/// The option as the SPANK calls take it (they never write through it).
pub(super) fn syndeo_option() -> *mut sys::spank_option {
    &SYNDEO_OPTION.0 as *const sys::spank_option as *mut sys::spank_option
}
