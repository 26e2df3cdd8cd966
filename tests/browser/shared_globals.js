// @ts-check
// The shared widget helpers as page globals, for tests/browser/test_shared_js.py: linked like a widget's
// module (interplab.widgets._bundle), it has no exports, so the page runs it as a plain script.
import * as shared from "../../widgets/js/shared/index.js";

Object.assign(window, shared);
