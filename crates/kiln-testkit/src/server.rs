//! A real model loaded for serving, and the server on a free loopback port in-process.

use std::net::SocketAddr;
use std::sync::Arc;

use kiln_format::GgufFile;
use kiln_model::Model;
use kiln_server::AppState;
use kiln_tokenizer::Tokenizer;
use kiln_tokenizer::chat::ChatTemplate;

/// A model, its tokenizer and its chat template, read from one GGUF file.
pub struct Loaded {
    pub model: Arc<Model>,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Arc<ChatTemplate>,
}

/// Loads a cached model that has a chat template (see [`crate::model_path`]); panics
/// naming what is missing.
pub fn load(name: &str) -> Loaded {
    let path = crate::model_path(name);
    let file = Arc::new(
        GgufFile::open(&path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display())),
    );
    let tok = Tokenizer::from_gguf(file.metadata())
        .unwrap_or_else(|e| panic!("the tokenizer of {name}: {e}"));
    let template = ChatTemplate::from_gguf(file.metadata(), &tok)
        .unwrap_or_else(|e| panic!("the chat template of {name}: {e}"))
        .unwrap_or_else(|| panic!("{name} has no chat template"));
    let model =
        Arc::new(Model::from_gguf(file).unwrap_or_else(|e| panic!("the model {name}: {e}")));
    Loaded {
        model,
        tokenizer: Arc::new(tok),
        template: Arc::new(template),
    }
}

/// Serves `state` on `127.0.0.1:0` from a thread of its own (a two-worker tokio runtime)
/// until the process ends; returns the bound address once the listener is up.
pub fn serve(state: AppState) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send");
            kiln_server::run(listener, state, std::future::pending())
                .await
                .expect("serve");
        });
    });
    rx.recv().expect("server address")
}
