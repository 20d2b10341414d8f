// The Strategy page's actions on failed outbox rows: retry (offered only where it cannot double an order) and
// dismiss. The page reloads to show the row's new state.
const token = new URLSearchParams(location.search).get('token') || '';
const notice = document.getElementById('notice');
for (const b of document.querySelectorAll('button[data-row]')) {
  b.onclick = async () => {
    const act = b.dataset.act;
    if (act === 'dismiss' && !confirm('Dismiss row ' + b.dataset.row + '? Do it once you have dealt with it at the broker.')) return;
    const r = await fetch('/api/strategies/' + encodeURIComponent(id) + '/outbox/' + b.dataset.row + '/' + act,
                          { method: 'POST', headers: { Authorization: 'Bearer ' + token } });
    const data = await r.json().catch(() => ({}));
    if (!r.ok) { notice.textContent = act + ' failed: ' + (data.error || 'HTTP ' + r.status); return; }
    notice.textContent = 'Row ' + b.dataset.row + ' is ' + data.status + '.';
    setTimeout(() => location.reload(), 800);
  };
}
