// Material starts its search worker from the worker's file, which a page opened over file:// may not do. This script
// runs before Material's bundle and makes that worker start from a Blob of its source instead
// (search-worker-source.js, written by docs/hooks/interplab_site.py); every other worker starts as usual.
(function () {
  "use strict";
  const source = window.__ilabSearchWorkerSource;
  if (location.protocol !== "file:" || typeof source !== "string") return;
  const PageWorker = window.Worker;
  window.Worker = function (url, options) {
    if (!/\/workers\/search\.[^/]*\.js$/.test(String(url))) return new PageWorker(url, options);
    const blob = new Blob([source], { type: "text/javascript" });
    return new PageWorker(URL.createObjectURL(blob), options);
  };
})();
