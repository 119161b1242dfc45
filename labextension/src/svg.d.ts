// The bundler loads .svg imported from code as a raw string (asset/source).
declare module '*.svg' {
  const value: string;
  export default value;
}
