// The Strategies page: the webhook URL (it holds the token) is fetched only when revealed or copied, and a
// rotation asks first. Every call carries the admin token from the page's URL as a bearer header.
const token = new URLSearchParams(location.search).get('token') || '';
const auth = { headers: { Authorization: 'Bearer ' + token } };
const notice = document.getElementById('notice');
const api = id => '/api/strategies/' + encodeURIComponent(id);
async function url(id) {
  const r = await fetch(api(id) + '/webhook_url', auth);
  if (!r.ok) throw new Error('HTTP ' + r.status);
  return (await r.json()).webhook_url;
}
for (const b of document.querySelectorAll('button[data-act]')) {
  b.onclick = async () => {
    const id = b.dataset.id, out = document.getElementById('url-' + b.dataset.n);
    try {
      if (b.dataset.act === 'reveal') {
        if (out.dataset.shown) { out.textContent = out.dataset.masked; delete out.dataset.shown; b.textContent = 'Reveal'; }
        else { out.dataset.masked = out.textContent; out.textContent = await url(id); out.dataset.shown = 1; b.textContent = 'Hide'; }
      } else if (b.dataset.act === 'copy') {
        await navigator.clipboard.writeText(await url(id));
        notice.textContent = 'Webhook URL of ' + id + ' copied.';
      } else if (b.dataset.act === 'rotate') {
        if (!confirm('Rotate the token of ' + id + '? The current webhook URL stops working at once; ' +
                     'every alert sender must be given the new one.')) return;
        const r = await fetch(api(id) + '/rotate', { method: 'POST', headers: auth.headers });
        const body = await r.json().catch(() => ({}));
        // A rotation the database did not confirm may still land, and then only the new URL answers: shown.
        if (!r.ok && body.code === 'rotation_unconfirmed' && body.webhook_url) {
          out.textContent = body.webhook_url; out.dataset.shown = 1;
          notice.textContent = 'Rotation of ' + id + ' not confirmed: ' + body.error + ' The new URL is shown.';
          return;
        }
        if (!r.ok) throw new Error('HTTP ' + r.status + (body.error ? ': ' + body.error : ''));
        out.textContent = body.webhook_url; out.dataset.shown = 1;
        notice.textContent = 'Token of ' + id + ' rotated: give senders the new URL shown.';
      }
    } catch (e) { notice.textContent = 'Failed: ' + e.message; }
  };
}
