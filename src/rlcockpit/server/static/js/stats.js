// Client-side smoothing and window statistics for the dashboard curves. Nulls (non-finite values
// sent as null by the API) stay null and are not counted in any window.

// Debiased exponential moving average, as TensorBoard's smoothing slider: s in [0, 1).
export function ema(values, smoothing) {
  const out = new Array(values.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || v === undefined || !Number.isFinite(v)) {
      out[i] = null;
      continue;
    }
    last = last * smoothing + (1 - smoothing) * v;
    n += 1;
    out[i] = smoothing === 0 ? v : last / (1 - smoothing ** n);
  }
  return out;
}

function trailing(values, i, window) {
  const out = [];
  for (let j = Math.max(0, i - window + 1); j <= i; j++) {
    const v = values[j];
    if (v !== null && v !== undefined && Number.isFinite(v)) out.push(v);
  }
  return out;
}

// Mean of the last `window` finite values up to and including each point (seed 002 §2.2 KL lines).
export function movingAverage(values, window) {
  return values.map((v, i) => {
    const w = trailing(values, i, window);
    return w.length ? w.reduce((a, b) => a + b, 0) / w.length : null;
  });
}

// Quantile with linear interpolation between order statistics (numpy's default method).
export function quantile(sortedValues, q) {
  const n = sortedValues.length;
  if (!n) return null;
  const pos = (n - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, n - 1);
  return sortedValues[lo] + (sortedValues[hi] - sortedValues[lo]) * (pos - lo);
}

// q-quantile of the last `window` finite values at each point (the KL chart's P90 line).
export function rollingQuantile(values, window, q) {
  return values.map((v, i) => {
    const w = trailing(values, i, window).sort((a, b) => a - b);
    return quantile(w, q);
  });
}

// Steps per second over the last `n` (step, wall time) pairs.
export function stepRate(steps, walls, n = 20) {
  const k = Math.min(n, steps.length);
  if (k < 2) return null;
  const i0 = steps.length - k;
  const dt = walls[walls.length - 1] - walls[i0];
  const ds = steps[steps.length - 1] - steps[i0];
  return dt > 0 ? ds / dt : null;
}
