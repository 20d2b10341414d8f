// The Logs view's refresh: every 2 s, the newest rows from the JSON API (`id` is set by the page).
const token = new URLSearchParams(location.search).get('token') || '';
const rows = document.getElementById('rows'), status = document.getElementById('status');
const level = document.getElementById('level');
document.getElementById('picker').onchange = e =>
  location.href = '/logs/' + encodeURIComponent(e.target.value) + '?token=' + encodeURIComponent(token);
function cell(tr, text, cls) { const td = tr.insertCell(); td.textContent = text; if (cls) td.className = cls; }
async function refresh() {
  try {
    const r = await fetch('/api/strategies/' + encodeURIComponent(id) + '/logs?limit=200&level=' + level.value,
                          { headers: { Authorization: 'Bearer ' + token } });
    if (!r.ok) throw new Error('HTTP ' + r.status);
    const data = await r.json();
    const body = document.createElement('tbody'); body.id = 'rows';
    for (const l of data.logs) {
      const tr = body.insertRow(); tr.className = 'lvl-' + l.level;
      cell(tr, l.time, 'time'); cell(tr, l.level, 'level'); cell(tr, l.decision); cell(tr, String(l.http_status));
      cell(tr, l.message, 'msg');
    }
    if (!data.logs.length) { const tr = body.insertRow(); tr.className = 'empty'; const td = tr.insertCell();
      td.colSpan = 5; td.textContent = 'No log rows yet.'; }
    document.getElementById('rows').replaceWith(body);
    status.textContent = data.logs.length + ' row(s) shown · updated ' + new Date().toLocaleTimeString();
  } catch (e) { status.textContent = 'refresh failed: ' + e.message; }
}
level.onchange = refresh;
setInterval(refresh, 2000);
