/* The engine's whole-tile colour correction (mosaic/correction.py), for the create page's
   "tiles ↔ photo" examples: the offset one tile of mean colour `mean` gets in a cell of mean
   colour `cell` at `percent`. In CIELAB: lightness 1.75 × percent of the way (at most all of
   it), chroma percent of the way but only as far as the whole move stays within the budget
   of ΔE00 (4.5 at 50 %). The browser test holds it to the engine's own offsets. */
"use strict";

window.PMCorrection = (() => {
  const LIGHTNESS = 1.75;
  const BUDGET = 4.5;
  const WHITE = [0.95047, 1.0, 1.08883];
  const TO_XYZ = [[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.072175], [0.0193339, 0.119192, 0.9503041]];
  const TO_RGB = [[3.2404542, -1.5371385, -0.4985314], [-0.969266, 1.8760108, 0.041556], [0.0556434, -0.2040259, 1.0572252]];

  const linear = (v) => { const c = v / 255; return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  const encode = (c) => 255 * (c <= 0.0031308 ? 12.92 * c : 1.055 * c ** (1 / 2.4) - 0.055);
  const f = (t) => (t > 216 / 24389 ? Math.cbrt(t) : ((24389 / 27) * t + 16) / 116);
  const finv = (t) => (t > 6 / 29 ? t * t * t : 3 * (6 / 29) ** 2 * (t - 4 / 29));
  const dot = (row, v) => row[0] * v[0] + row[1] * v[1] + row[2] * v[2];

  function toLab(rgb) {
    const lin = rgb.map(linear);
    const [fx, fy, fz] = TO_XYZ.map((row, i) => f(dot(row, lin) / WHITE[i]));
    return [116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)];
  }

  function toRgb(lab) {
    const fy = (lab[0] + 16) / 116;
    const xyz = [finv(fy + lab[1] / 500) * WHITE[0], finv(fy), finv(fy - lab[2] / 200) * WHITE[2]];
    return TO_RGB.map((row) => Math.round(Math.min(255, Math.max(0, encode(Math.max(0, dot(row, xyz)))))));
  }

  const rad = (d) => (d * Math.PI) / 180;

  /** CIEDE2000 between two Lab colours (Sharma, Wu and Dalal, 2005). */
  function deltaE00(p, q) {
    const cMean = (Math.hypot(p[1], p[2]) + Math.hypot(q[1], q[2])) / 2;
    const g = 0.5 * (1 - Math.sqrt(cMean ** 7 / (cMean ** 7 + 25 ** 7)));
    const a1 = (1 + g) * p[1], a2 = (1 + g) * q[1];
    const c1 = Math.hypot(a1, p[2]), c2 = Math.hypot(a2, q[2]);
    const hue = (b, a) => ((Math.atan2(b, a) * 180) / Math.PI + 360) % 360;
    const h1 = hue(p[2], a1), h2 = hue(q[2], a2);
    const none = c1 * c2 === 0;
    let dh = h2 - h1;
    if (dh > 180) dh -= 360; else if (dh < -180) dh += 360;
    if (none) dh = 0;
    const dH = 2 * Math.sqrt(c1 * c2) * Math.sin(rad(dh) / 2);
    const lMean = (p[0] + q[0]) / 2, cpMean = (c1 + c2) / 2;
    let hMean = h1 + h2;
    if (!none) hMean = Math.abs(h1 - h2) <= 180 ? hMean / 2 : (hMean < 360 ? (hMean + 360) / 2 : (hMean - 360) / 2);
    const t = 1 - 0.17 * Math.cos(rad(hMean - 30)) + 0.24 * Math.cos(rad(2 * hMean))
      + 0.32 * Math.cos(rad(3 * hMean + 6)) - 0.2 * Math.cos(rad(4 * hMean - 63));
    const rotation = 30 * Math.exp(-(((hMean - 275) / 25) ** 2));
    const rc = 2 * Math.sqrt(cpMean ** 7 / (cpMean ** 7 + 25 ** 7));
    const sl = 1 + (0.015 * (lMean - 50) ** 2) / Math.sqrt(20 + (lMean - 50) ** 2);
    const sc = 1 + 0.045 * cpMean, sh = 1 + 0.015 * cpMean * t;
    const rt = -Math.sin(rad(2 * rotation)) * rc;
    const L = (q[0] - p[0]) / sl, C = (c2 - c1) / sc, H = dH / sh;
    return Math.sqrt(L * L + C * C + H * H + rt * C * H);
  }

  const budget = (percent) => (percent >= 100 ? Infinity : (BUDGET * percent) / (100 - percent));

  /** The [r, g, b] offset of a tile of mean colour `mean` in a cell of mean colour `cell`. */
  function offset(mean, cell, percent) {
    if (percent <= 0) return [0, 0, 0];
    const start = toLab(mean), target = toLab(cell);
    const share = [Math.min(1, (LIGHTNESS * percent) / 100), percent / 100, percent / 100];
    const goal = start.map((v, i) => v + share[i] * (target[i] - v));
    const limit = budget(percent);
    if (deltaE00(start, goal) > limit) {
      const at = (u) => [goal[0], start[1] + u * (goal[1] - start[1]), start[2] + u * (goal[2] - start[2])];
      let low = 0, high = 1; // the largest chroma share within the budget (none if lightness alone is over)
      for (let i = 0; i < 30; i++) {
        const mid = (low + high) / 2;
        if (deltaE00(start, at(mid)) <= limit) low = mid; else high = mid;
      }
      goal.splice(0, 3, ...at(low));
    }
    return toRgb(goal).map((v, i) => v - mean[i]);
  }

  return { offset, deltaE00, toLab };
})();
