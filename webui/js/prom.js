// Prometheus text exposition format (version 0.0.4) as /metrics writes it, and histogram
// quantiles computed the way Prometheus's histogram_quantile() does.

// Returns [{name, labels: {k: v}, value}] for every sample line.
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[2]) {
      for (const l of m[2].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\n/g, "\n").replace(/\\(.)/g, "$1");
      }
    }
    const v = m[3] === "+Inf" ? Infinity : m[3] === "-Inf" ? -Infinity : parseFloat(m[3]);
    out.push({ name: m[1], labels, value: v });
  }
  return out;
}

// {model: {metric name: value}} for samples carrying a model label (histogram buckets apart),
// and {model: {histogram name: [[le, cumulative count], ...]}} sorted by le.
export function byModel(samples) {
  const values = {}, buckets = {};
  for (const s of samples) {
    const model = s.labels.model;
    if (model === undefined) continue;
    if (s.name.endsWith("_bucket") && s.labels.le !== undefined) {
      const h = s.name.slice(0, -"_bucket".length);
      ((buckets[model] ??= {})[h] ??= []).push([s.labels.le === "+Inf" ? Infinity : parseFloat(s.labels.le), s.value]);
    } else {
      (values[model] ??= {})[s.name] = (values[model]?.[s.name] ?? 0) + s.value;
    }
  }
  for (const m of Object.values(buckets)) for (const b of Object.values(m)) b.sort((x, y) => x[0] - y[0]);
  return { values, buckets };
}

// The q-quantile (0..1) of cumulative buckets [[le, count]...] (last le = +Inf), linear within
// a bucket; null without observations. Like Prometheus, a quantile in the +Inf bucket is the
// largest finite bound.
export function quantile(q, buckets) {
  if (!buckets || !buckets.length) return null;
  const total = buckets[buckets.length - 1][1];
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, count] of buckets) {
    if (count >= rank) {
      if (le === Infinity) return prevLe;
      if (count === prevCount) return le;
      return prevLe + (le - prevLe) * ((rank - prevCount) / (count - prevCount));
    }
    prevLe = le;
    prevCount = count;
  }
  return prevLe;
}

// Buckets of the observations between two snapshots (b minus a, bound by bound).
export function bucketDelta(a, b) {
  if (!a) return b;
  return b.map(([le, c], i) => [le, c - (a[i] ? a[i][1] : 0)]);
}
