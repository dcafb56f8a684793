//! Shared by the tests: a temporary folder; for the accuracy tests, statistics of lifetime maps, first- and second-order
//! (delta-method) predictions of an estimator's spread and bias under Poisson noise, and
//! the Cramer-Rao bound of the lifetime from the Fisher information of the binned decay.
#![allow(dead_code)] // each test file uses part of it

/// Mean and sample standard deviation of the finite values, and how many there were.
pub fn stats(v: impl Iterator<Item = f32>) -> (f64, f64, usize) {
    let v: Vec<f64> = v.filter(|x| x.is_finite()).map(f64::from).collect();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt(), v.len())
}

/// Predicted bias and standard deviation of `estimate(counts)` when the counts of bin `j`
/// are independent Poisson variates of mean `lambda[j]`: to second order,
/// `E = f(lambda) + 1/2 sum f_jj lambda_j` and `Var = sum f_j^2 lambda_j`, the derivatives
/// by central differences at a step of a tenth of each bin's noise.
pub fn delta_method(lambda: &[f64], estimate: impl Fn(&[f64]) -> f64) -> (f64, f64) {
    let f0 = estimate(lambda);
    let mut x = lambda.to_vec();
    let (mut bias, mut var) = (0.0, 0.0);
    for j in 0..lambda.len() {
        let d = 0.1 * lambda[j].sqrt() + 1e-6;
        x[j] = lambda[j] + d;
        let up = estimate(&x);
        x[j] = lambda[j] - d;
        let down = estimate(&x);
        x[j] = lambda[j];
        let grad = (up - down) / (2.0 * d);
        let curv = (up - 2.0 * f0 + down) / (d * d);
        var += grad * grad * lambda[j];
        bias += 0.5 * curv * lambda[j];
    }
    (bias, var.sqrt())
}

/// Cramer-Rao bound on the standard deviation of the lifetime of `expected(tau)` (counts
/// per bin, proportional to the photon count) with the amplitude free: Poisson Fisher
/// information `I = sum_j (d lambda_j)(d lambda_j)^T / lambda_j` over (amplitude, tau).
pub fn crb_tau(tau: f64, expected: impl Fn(f64) -> Vec<f64>) -> f64 {
    let l0 = expected(tau);
    let d = 1e-5 * tau;
    let (up, down) = (expected(tau + d), expected(tau - d));
    let (mut iaa, mut iat, mut itt) = (0.0, 0.0, 0.0);
    for j in 0..l0.len() {
        if l0[j] <= 0.0 {
            continue;
        }
        // d lambda / d ln(amplitude) = lambda; d lambda / d tau by central differences.
        let da = l0[j];
        let dt = (up[j] - down[j]) / (2.0 * d);
        iaa += da * da / l0[j];
        iat += da * dt / l0[j];
        itt += dt * dt / l0[j];
    }
    (iaa / (iaa * itt - iat * iat)).sqrt()
}

/// A fresh temporary folder, removed on drop.
pub struct Tmp(pub std::path::PathBuf);

impl Tmp {
    pub fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let p =
            std::env::temp_dir().join(format!("flim-test-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
