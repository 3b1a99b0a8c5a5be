package rmqfilter.harness;

import org.apache.rocketmq.common.ControllerConfig;
import org.apache.rocketmq.controller.ControllerManager;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;

/**
 * A one-node controller (the DLedger controller, its raft group of one on 127.0.0.1:RAFT_PORT) that
 * serves brokers in controller mode on 127.0.0.1:PORT, with its files under HOME; started in the
 * client's JVM (its {@code controller_start} command) and stopped with it.
 */
public final class Controller {
    private Controller() {
    }

    /** Initializes and starts the controller; elections scan for inactive brokers every second. */
    static ControllerManager start(int port, int raftPort, String home) throws Exception {
        ControllerConfig config = new ControllerConfig();
        config.setRocketmqHome(home);
        config.setConfigStorePath(home + "/controller.properties");
        config.setControllerDLegerGroup("harness");
        config.setControllerDLegerPeers("n0-127.0.0.1:" + raftPort);
        config.setControllerDLegerSelfId("n0");
        config.setControllerStorePath(home + "/store");
        config.setMappedFileSize(4 * 1024 * 1024);
        config.setScanNotActiveBrokerInterval(1000);
        config.setEnableElectUncleanMaster(true);
        NettyServerConfig server = new NettyServerConfig();
        server.setBindAddress("127.0.0.1");
        server.setListenPort(port);
        ControllerManager manager = new ControllerManager(config, server, new NettyClientConfig());
        if (!manager.initialize()) {
            throw new IllegalStateException("controller failed to initialize");
        }
        manager.start();
        return manager;
    }
}
