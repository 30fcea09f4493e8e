export * from './scripted-model-server.js'
