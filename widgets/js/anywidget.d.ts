// What anywidget hands a widget's `initialize` and `render` (the part interplab uses), for `tsc --checkJs`.
// Types only: nothing here runs, and no module imports it (the declarations are global).

/** A widget model: the Python object's synced traits, its messages, and change events. */
interface AnyModel {
  /** A trait's value as the browser holds it (bytes arrive as an ArrayPayload's `view`). */
  get(name: string): any;
  set(name: string, value: unknown): void;
  /** Send the traits set since the last call to the kernel. */
  save_changes(): void;
  /** `change:<trait>` (no arguments) or `msg:custom` (content and binary buffers from the kernel). */
  on(event: string, callback: (...args: any[]) => void): void;
  off(event?: string | null, callback?: ((...args: any[]) => void) | null): void;
  /** A custom message to the kernel; throws where there is none (exported HTML). */
  send(content: object, callbacks?: unknown, buffers?: ArrayBuffer[] | ArrayBufferView[]): void;
}

/** What `render` receives: the model and the element the view draws into. */
interface RenderProps {
  model: AnyModel;
  el: HTMLElement;
}

/** What `initialize` receives: the model, once per widget (not per view). */
interface InitializeProps {
  model: AnyModel;
}

/** Undoes what `initialize` or `render` set up (listeners, hover boxes in the page body). */
type Cleanup = () => void;

/** A widget module's default export. */
interface WidgetModule {
  initialize?: (props: InitializeProps) => Cleanup | void;
  render: (props: RenderProps) => Cleanup | void;
}

/** A binary array as Python's `array_payload` sends it (static pages may hand over another buffer form). */
interface ArrayPayload {
  view: DataView | ArrayBuffer | ArrayBufferView;
  dtype: "float32" | "int32" | "uint8";
  shape?: number[];
}

/** Handlers by model event name, for ilabListen. */
type ModelHandlers = Record<string, (...args: any[]) => void>;
