//! Principal directions for narrowing a model (`warm_start.rs`): the top eigenvectors of the
//! uncentred second moment XᵀX of rows X (N, C), by cyclic Jacobi rotations (Golub & Van
//! Loan, "Matrix Computations", 8.5) in f64. O(C³) per sweep: seconds for C in the hundreds.

/// The `k` rows (k, C), orthonormal, spanning the top-k eigenvectors of XᵀX for x (N, C)
/// row-major, largest eigenvalue first.
pub(crate) fn top_directions(x: &[f32], n: usize, c: usize, k: usize) -> Vec<f32> {
    // a = XᵀX (C, C)
    let mut a = vec![0f64; c * c];
    for row in x.chunks_exact(c).take(n) {
        for i in 0..c {
            let ri = row[i] as f64;
            for j in 0..c {
                a[i * c + j] += ri * row[j] as f64;
            }
        }
    }
    let (vals, vecs) = jacobi(a, c);
    let mut order: Vec<usize> = (0..c).collect();
    order.sort_by(|&i, &j| vals[j].total_cmp(&vals[i]));
    // vecs holds eigenvector i in column i
    order[..k]
        .iter()
        .flat_map(|&col| (0..c).map(move |r| (r, col)))
        .map(|(r, col)| vecs[r * c + col] as f32)
        .collect()
}

/// Eigenvalues and eigenvectors (columns of the returned (C, C)) of symmetric a (C, C).
fn jacobi(mut a: Vec<f64>, c: usize) -> (Vec<f64>, Vec<f64>) {
    let mut v = vec![0f64; c * c];
    (0..c).for_each(|i| v[i * c + i] = 1.0);
    let total: f64 = a.iter().map(|x| x * x).sum();
    for _sweep in 0..50 {
        let off: f64 = (0..c)
            .flat_map(|i| (0..c).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * c + j] * a[i * c + j])
            .sum();
        if off <= 1e-22 * total.max(1e-300) {
            break;
        }
        for p in 0..c {
            for q in p + 1..c {
                let apq = a[p * c + q];
                if apq.abs() < 1e-300 {
                    continue;
                }
                // the rotation that zeroes a[p][q]
                let theta = (a[q * c + q] - a[p * c + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let cs = 1.0 / (t * t + 1.0).sqrt();
                let sn = t * cs;
                for k in 0..c {
                    let (akp, akq) = (a[k * c + p], a[k * c + q]);
                    a[k * c + p] = cs * akp - sn * akq;
                    a[k * c + q] = sn * akp + cs * akq;
                }
                for k in 0..c {
                    let (apk, aqk) = (a[p * c + k], a[q * c + k]);
                    a[p * c + k] = cs * apk - sn * aqk;
                    a[q * c + k] = sn * apk + cs * aqk;
                }
                for k in 0..c {
                    let (vkp, vkq) = (v[k * c + p], v[k * c + q]);
                    v[k * c + p] = cs * vkp - sn * vkq;
                    v[k * c + q] = sn * vkp + cs * vkq;
                }
            }
        }
    }
    ((0..c).map(|i| a[i * c + i]).collect(), v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_direction_of_points_on_a_line_is_the_line() {
        // rows t (3, 4, 0) / 5 plus a little of (0, 0, 1)
        let x: Vec<f32> = (1..=20)
            .flat_map(|t| {
                let t = t as f32;
                [0.6 * t, 0.8 * t, 0.01 * (t % 3.0)]
            })
            .collect();
        let p = top_directions(&x, 20, 3, 2);
        let s = p[0].signum();
        assert!(
            (s * p[0] - 0.6).abs() < 1e-3 && (s * p[1] - 0.8).abs() < 1e-3,
            "{p:?}"
        );
        let dot: f32 = p[..3].iter().zip(&p[3..]).map(|(a, b)| a * b).sum();
        assert!(dot.abs() < 1e-5);
    }
}
