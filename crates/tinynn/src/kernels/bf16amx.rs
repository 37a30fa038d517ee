//! The bf16 product on AMX tiles (Intel SDM vol. 1 ch. 18, "Intel AMX"; Linux's
//! Documentation/arch/x86/xstate.rst for the permission): `tdpbf16ps` multiplies a 16 x 32 bf16
//! tile of A by a 16 x 16-pair tile of B into 16 x 16 f32 sums, 8192 multiply-adds per
//! instruction. One task computes 32 x 32 outputs in four accumulator tiles (tmm0..3) from two
//! A tiles (tmm4, 5) and two B tiles (tmm6, 7), k in steps of 32, then adds them into dst.
//!
//! The operands are `bf16gemm`'s packs: A in tiles, each group of 16 rows a run of Kp/32
//! tiles of 16 rows x 32 bf16 (1 KiB, loaded at a 64-byte stride: in the microbenchmark of
//! this change 15-45% faster than rows of Kp at a stride of 2 Kp bytes), rows padded to a
//! multiple of 32; B as panels of 32 columns, each Kp/2 rows of 32 u32 pairs: a B tile is 16
//! of those rows, 16 pairs wide, at a stride of 128 bytes.

use std::arch::asm;
use std::sync::OnceLock;

/// Whether the CPU has AMX-TILE and AMX-BF16 and Linux let this process use the tile data
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, asked once). `TOY_NO_AMX=1` turns
/// it off (the AVX512-BF16 kernel is used instead).
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        if std::env::var_os("TOY_NO_AMX").is_some_and(|v| v != "0") {
            return false;
        }
        let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
        let (bf16, tile) = (leaf7.edx >> 22 & 1 == 1, leaf7.edx >> 24 & 1 == 1);
        if !(bf16 && tile && super::bf16gemm::available()) {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a plain syscall with integer arguments.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    })
}

/// Palette 1: tiles 0..7 of 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Loads the tile configuration on this thread; [`release`] after the tiles are used.
///
/// # Safety
/// [`available`] must be true.
pub unsafe fn configure() {
    asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly));
}

/// # Safety
/// After [`configure`] on this thread.
pub unsafe fn release() {
    asm!("tilerelease", options(nostack, nomem));
}

/// `c (32 x 32, row-major) = A (32 rows of kp at `a`, in tiles) x panel `b` (kp/2 rows of 32
/// u32)`, k in steps of 32.
///
/// # Safety
/// The tiles must be configured on this thread, `kp` a multiple of 32, `a` 32 rows of `kp`
/// bf16 in tiles and `b` kp/2 * 32 u32.
pub unsafe fn block(a: *const u16, kp: usize, b: *const u32, c: &mut [f32; 32 * 32]) {
    block_into(a, kp, b, c.as_mut_ptr(), 32, false)
}

/// [`block`] straight into 32 x 32 floats at `c` with row stride `ld`: `c = A B`, or with
/// `acc` `c += A B` (the sums start from what c holds).
///
/// # Safety
/// As [`block`], and `c` must hold 32 rows of 32 floats at stride `ld`.
pub unsafe fn block_into(
    a: *const u16,
    kp: usize,
    b: *const u32,
    c: *mut f32,
    ld: usize,
    acc: bool,
) {
    let s = ld * 4;
    if acc {
        asm!(
            "tileloadd tmm0, [{c0} + {s}*1]",
            "tileloadd tmm1, [{c1} + {s}*1]",
            "tileloadd tmm2, [{c2} + {s}*1]",
            "tileloadd tmm3, [{c3} + {s}*1]",
            c0 = in(reg) c,
            c1 = in(reg) c.add(16),
            c2 = in(reg) c.add(16 * ld),
            c3 = in(reg) c.add(16 * ld + 16),
            s = in(reg) s,
            options(nostack, readonly)
        );
    } else {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
    }
    let (sa, sb) = (64usize, 128usize);
    for kb in (0..kp).step_by(32) {
        // the k-step's tile of rows 0..16, and of rows 16..32 (the second group's run)
        let a0 = a.add(kb * 16);
        let a1 = a.add(16 * kp + kb * 16);
        let b0 = b.add(kb / 2 * 32);
        let b1 = b0.add(16);
        // each product issued as soon as its operands are loaded, so that the later loads
        // overlap it (the tile registers are not renamed)
        asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            a0 = in(reg) a0,
            a1 = in(reg) a1,
            b0 = in(reg) b0,
            b1 = in(reg) b1,
            sa = in(reg) sa,
            sb = in(reg) sb,
            options(nostack, readonly)
        );
    }
    asm!(
        "tilestored [{c0} + {s}*1], tmm0",
        "tilestored [{c1} + {s}*1], tmm1",
        "tilestored [{c2} + {s}*1], tmm2",
        "tilestored [{c3} + {s}*1], tmm3",
        c0 = in(reg) c,
        c1 = in(reg) c.add(16),
        c2 = in(reg) c.add(16 * ld),
        c3 = in(reg) c.add(16 * ld + 16),
        s = in(reg) s,
        options(nostack)
    );
}
