// quants serve: the copy buttons. Copies the button's data-copy text (a command line) to the
// clipboard and says so on the button; no other script runs on these pages.
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  const text = button.dataset.copy;
  try {
    await navigator.clipboard.writeText(text);
  } catch (err) {
    // No clipboard API (an insecure origin): copy from a hidden text area instead.
    const area = document.createElement("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.dataset.copied = text;
  button.textContent = "copied";
});
